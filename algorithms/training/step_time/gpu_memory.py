"""One GPU's memory when an agent is sharded over its GPUs (A8 of `step_estimate`: FSDP2
divides the weights, moments and gradients) and what its vLLM engine preallocates (A5); the
one-line refusal of a worker-group config (`ray.ranks_per_agent` > 1) that does not fit them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from algorithms.training.memory_plan import GIB, DevicePlan, PolicyPlan, Workload
from algorithms.training.ray.engine_settings import (
    EngineSettings,
    engine_options,
    engine_settings,
    rank_update_peak,
)
from algorithms.training.run_config import ConfigError
from algorithms.training.step_time.anchors import VLLM_WORKSPACE_BYTES

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
    holds while it samples (the trainer's resident state beside it)."""

    kv_bytes: float
    sampling_bytes: float


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
    return EngineMemory(kv, resident + engine)


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


def sharded_refusal(
    config: Any, work: Workload, devices: Sequence[DevicePlan], ranks: int
) -> str | None:
    """The first agent of a worker-group `config` whose busiest phase on one of its `ranks`
    GPUs (`per_gpu_bytes`; an agent sampling with vLLM generates within the trainer state
    plus the engine's share) exceeds the usable memory, as one line naming the option to
    change; None when every agent fits."""
    for device in devices:
        for index, name, plan in device.agents:
            refusal = _agent_refusal(config, work, device, (index, name, plan), ranks)
            if refusal is not None:
                return refusal
    return None


def _agent_refusal(
    config: Any,
    work: Workload,
    device: DevicePlan,
    agent: tuple[int, str, PolicyPlan],
    ranks: int,
) -> str | None:
    index, name, plan = agent
    phases = per_gpu_bytes(plan, ranks)
    tunable = {p: [(t.name, t.bytes, t.knob) for t in plan.phases[p] if t.knob] for p in phases}
    options = config.agents[index].options
    if options.get("rollout_backend") == "vllm":
        engine = agent_engine_memory(config, index, plan, ranks, work, device.capacity)
        if engine is not None:
            del phases["generate"], tunable["generate"]
            knob = "vllm_kv_cache_gib" if options.get("vllm_kv_cache_gib") else None
            share = engine.sampling_bytes - rank_update_peak(plan, ranks)[0]
            phases["generate (vLLM)"] = engine.sampling_bytes
            tunable["generate (vLLM)"] = [
                ("the vLLM engine's share", share, knob or "vllm_gpu_memory_utilization")
            ]
    phase = max(phases, key=phases.__getitem__)
    peak, usable = phases[phase], device.usable
    if peak <= usable:
        return None
    where = (
        f"{name} needs {peak / GIB:.1f} GiB per GPU on {device.device} x {ranks} FSDP2 ranks "
        f"({usable / GIB:.1f} GiB usable) in {phase}"
    )
    term, largest, knob = max(tunable[phase], key=lambda t: t[1])
    if peak - largest >= usable:
        return (
            f"ray.ranks_per_agent: {where}; its state per GPU without {term} does not fit "
            "either: more ranks per agent (with ray.num_gpus_per_agent), or a larger device"
        )
    return f"agents.{index}.options.{knob}: {where}, {term} {largest / GIB:.1f} GiB; lower {knob}"
