"""One GPU's memory when an agent is sharded over its GPUs (A8 of `step_estimate`: FSDP2
divides the weights, moments and gradients) and what its vLLM engine preallocates (A5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from algorithms.training.memory_plan import GIB, Architecture, PolicyPlan, Workload
from algorithms.training.memory_plan.lifecycle import Engine
from algorithms.training.memory_plan.reserves import VLLM_WORKSPACE_BYTES
from algorithms.training.ray.engine_settings import (
    EngineSettings,
    engine_options,
    engine_settings,
    rank_update_peak,
)
from algorithms.training.run_config import ConfigError

SHARDED_PREFIXES = ("weights (", "AdamW moments", "grads (")
"""The memory plan's terms FSDP2 shards over an agent's ranks (A8); every other term is one
rank's own (its micro-batch, its logits chunk, its KV cache, the bf16 weights it unshards)."""


def sharded(name: str) -> bool:
    return name.startswith(SHARDED_PREFIXES)


def per_gpu_bytes(plan: PolicyPlan, gpus: int) -> dict[str, float]:
    """Each phase's bytes on one of `gpus` FSDP2 ranks: the plan's sharded terms / gpus."""

    def held(terms) -> float:
        return sum(t.bytes / gpus if sharded(t.name) else t.bytes for t in terms)

    state = held(plan.persistent)
    return {phase: state + held(terms) for phase, terms in plan.phases.items()}


@dataclass(frozen=True)
class EngineMemory:
    """One GPU of an agent's vLLM engine (A5): the KV space it preallocates and all the GPU
    holds while it samples (the trainer's resident state beside it); the engine's own share
    (weights, KV, workspace) and whether it sleeps through the update (without sleep mode the
    share stays on the GPU beside scoring and the update)."""

    kv_bytes: float
    sampling_bytes: float
    engine_bytes: float
    sleep_mode: bool
    weight_bytes: float
    tensor_parallel: int


def vllm_engine_memory(
    plan: PolicyPlan, gpus: int, settings: EngineSettings, kv_cache_gib: float | None
) -> EngineMemory:
    """A5 from the engine's settings (`ray.engine_settings.engine_settings` on CUDA with the
    memory figures): `vllm_kv_cache_gib` when set, else the `vllm_gpu_memory_utilization`
    share less the engine's weights per GPU and its workspace."""
    if settings.engine_weight_bytes is None or settings.kv_cache_bytes is None:
        raise ValueError("vllm_engine_memory: the engine settings lack their memory figures")
    resident, _ = rank_update_peak(plan, gpus)
    if kv_cache_gib is not None:
        kv = kv_cache_gib * GIB
        engine = settings.engine_weight_bytes + kv + VLLM_WORKSPACE_BYTES
    else:
        kv = settings.kv_cache_bytes - VLLM_WORKSPACE_BYTES
        engine = settings.kv_cache_bytes + settings.engine_weight_bytes  # the whole share
    return EngineMemory(
        kv,
        resident + engine,
        engine,
        settings.sleep_mode,
        settings.engine_weight_bytes,
        settings.tensor_parallel_size,
    )


def agent_engine_memory(
    config: Any, index: int, plan: PolicyPlan, gpus: int, work: Workload, capacity: float
) -> EngineMemory | None:
    """Agent `index` of `config` on CUDA: its vLLM engine's KV space and the GPU's bytes while
    it samples (A5, from `ray.engine_settings`); None on another device, or for an agent that
    samples with transformers and whose engine settings would be refused."""
    agent = config.agents[index]
    try:
        settings = engine_settings(
            index,
            agent.options,
            config.sampling.max_new_tokens,
            gpus,
            architecture=plan.architecture,
            work=work,
            capacity=capacity,
        )
    except ConfigError:
        if agent.options.get("rollout_backend") == "vllm":
            raise
        return None
    if settings.kv_cache_bytes is None:
        return None
    kv_gib = engine_options(agent.options, f"agents.{index}.options").kv_cache_gib
    return vllm_engine_memory(plan, gpus, settings, kv_gib)


def staging_bytes(arch: Architecture, engine: EngineMemory, bucket_mb: float) -> float:
    """The sync's staging buffer (`ray.weight_sync.plan_buckets`): `vllm_sync_bucket_mb`, or
    the largest unit that travels whole (a decoder block, the embedding) in the engine's dtype."""
    per_param = engine.weight_bytes * engine.tensor_parallel / arch.params
    block = max(arch.layer_linear_params, arch.vocab_size * arch.hidden_size) * per_param
    return max(bucket_mb * 2**20, block)


def lifecycle_engine(config: Any, index: int, plan: PolicyPlan, engine: EngineMemory) -> Engine:
    """Agent `index`'s engine worker on one GPU for `memory_plan.lifecycle` (from its
    `agent_engine_memory` and its `vllm_*` options)."""
    where = f"agents.{index}.options"
    options = engine_options(config.agents[index].options, where)
    fixed = options.kv_cache_gib is not None
    return Engine(
        weight_bytes=engine.weight_bytes,
        kv_bytes=engine.kv_bytes,
        workspace_bytes=VLLM_WORKSPACE_BYTES,
        tensor_parallel=engine.tensor_parallel,
        sleeps=engine.sleep_mode,
        cuda_graphs=not options.enforce_eager,
        staging_bytes=staging_bytes(plan.architecture, engine, options.sync_bucket_mb),
        share_knob="vllm_kv_cache_gib" if fixed else "vllm_gpu_memory_utilization",
    )
