"""The vLLM engine of a worker group, derived from the run config (pure functions, no torch).

`engine_settings` turns an agent's `vllm_<field>` options, the run's sampling limit and the
group's size into what `vllm.LLM` is built with, and refuses, in one line naming the
`agents.N.options.vllm_<key>`, a setting that cannot work, before any model loads:

- `max_model_len`: `vllm_max_model_len`, else `vllm_max_prompt_tokens` +
  `sampling.max_new_tokens` (the run config has no prompt limit of its own; a longer
  prompt is refused when it comes);
- `tensor_parallel_size`: `vllm_tensor_parallel_size`, else the group's ranks divided by
  `vllm_data_parallel_size` (the engine replicas, default 1); tp x replicas must not exceed
  the ranks, and the ranks must divide evenly when tp is derived;
- sleep mode: `vllm_sleep_mode`, else on with CUDA and off on CPU; `true` on CPU is refused
  (vLLM's CuMemAllocator is CUDA only);
- on CUDA, memory per GPU (a rank and its tensor-parallel engine worker share one GPU):
  the engine takes `vllm_gpu_memory_utilization` x the GPU's memory for its weights (the
  model / tp in the engine's dtype) and KV cache. Too small: the share does not hold the
  engine's weights plus one `max_model_len` sequence's KV. Too large: the share plus what
  the trainer holds meanwhile does not fit the usable memory (`memory_plan.RESERVE_BYTES`
  kept back): with sleep mode the trainer's resident state while the engine generates
  (the update's peak is then the memory plan's, the engine holds nothing), without it the
  update's peak beside the awake engine.

The trainer's share per rank comes from `memory_plan.plan_policy` (one process's plan):
`memory_plan` has no sharded plan, so `rank_update_peak` divides the terms FSDP2 shards
(weights, AdamW moments, gradients, the KL reference) by the ranks and keeps the
per-micro-batch terms (activations, logits, autocast copies) whole, plus one decoder
layer gathered in full (FSDP's all-gather of the layer in use).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from algorithms.training import memory_plan
from algorithms.training.memory_plan import GIB, Architecture, PolicyPlan, Workload
from algorithms.training.run_config import ConfigError
from graft_env.policies.options import OPTION_PREFIX, VLLMEngineOptions
from graft_env.schema import OptionError

SHARDED_TERMS = ("weights", "AdamW moments", "grads", "KL reference weights")
"""`PolicyPlan` terms (by name prefix) that FSDP2 divides over the ranks."""

ENGINE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class EngineSettings:
    """What the group's engine is built with, and the memory figures behind them."""

    max_model_len: int
    tensor_parallel_size: int
    sleep_mode: bool
    data_parallel_size: int
    gpu_memory_utilization: float | None  # None on CPU (kv_cache_gib sizes the cache)
    kv_cache_bytes: float | None  # on CUDA: the share left for KV per GPU (vLLM sizes it)
    kv_tokens: int | None  # how many tokens that KV holds
    engine_weight_bytes: float | None  # per GPU
    trainer_bytes: float | None  # per rank, beside the engine (see the module docstring)

    def llm_kwargs(self) -> dict[str, Any]:
        """The `vllm.LLM` keyword arguments these settings fix."""
        return {
            "max_model_len": self.max_model_len,
            "tensor_parallel_size": self.tensor_parallel_size,
            "enable_sleep_mode": self.sleep_mode,
        }


def engine_options(options: Mapping[str, Any], where: str) -> VLLMEngineOptions:
    """An agent's `vllm_<field>` options, checked; a bad one names `where`.vllm_<key>."""
    prefixed = {key: value for key, value in options.items() if key.startswith(OPTION_PREFIX)}
    try:
        return VLLMEngineOptions.from_prefixed(prefixed)
    except OptionError as error:
        raise error.at(where, OPTION_PREFIX) from None


def engine_parallelism(where: str, engine: VLLMEngineOptions, ranks: int) -> int:
    """The replicas' tensor parallelism: `vllm_tensor_parallel_size`, else the ranks per
    replica; a layout the group's ranks cannot hold is a one-line ConfigError."""
    dp = engine.data_parallel_size
    if engine.tensor_parallel_size is None and ranks % dp:
        raise ConfigError(
            f"{where}.vllm_data_parallel_size: {dp} replicas do not divide the group's {ranks} "
            "rank(s) (ray.ranks_per_agent); set vllm_tensor_parallel_size"
        )
    tp = engine.tensor_parallel_size or ranks // dp
    if tp * dp > ranks:
        key, what = (
            ("vllm_tensor_parallel_size", f"{tp}")
            if dp == 1
            else ("vllm_data_parallel_size", f"{dp} replicas x tp {tp}")
        )
        raise ConfigError(
            f"{where}.{key}: {what} is more than the group's {ranks} rank(s) "
            "(ray.ranks_per_agent): the engine runs on the agent's devices"
        )
    return tp


def rank_update_peak(plan: PolicyPlan, ranks: int) -> tuple[float, float]:
    """(resident bytes between phases, peak bytes in the update) of one of `ranks` FSDP2
    ranks, from one process's plan (see the module docstring)."""

    def share(term: memory_plan.Term) -> float:
        return term.bytes / ranks if term.name.startswith(SHARDED_TERMS) else term.bytes

    arch = plan.architecture
    resident = sum(share(term) for term in plan.persistent)
    weights = next(t for t in plan.persistent if t.name.startswith("weights"))
    # FSDP2 unshards the layer in use and prefetches the next: two layers whole, counted
    # in the weights' dtype (bfloat16 under mixed precision: an upper bound)
    gathered = 2 * weights.bytes / arch.params * arch.layer_linear_params
    update = sum(share(term) for term in plan.phases["update"]) + gathered
    return resident, resident + update


def kv_bytes_per_token(arch: Architecture, dtype_bytes: int, tp: int) -> float:
    """KV-cache bytes of one token on one of `tp` GPUs (KV heads split over tp, replicated
    when there are fewer heads than GPUs)."""
    heads = max(1, arch.num_kv_heads // tp)
    return 2 * arch.num_layers * heads * arch.head_dim * dtype_bytes


def engine_settings(
    agent: int,
    options: Mapping[str, Any],
    max_new_tokens: int,
    ranks: int,
    *,
    architecture: Architecture | None = None,
    work: Workload | None = None,
    capacity: float | None = None,
) -> EngineSettings:
    """The engine of agent `agent` (its `options`: a run config's `agents.N.options`) in a
    group of `ranks` ranks, sampling at most `max_new_tokens` tokens. The memory checks run
    when the device is CUDA and `architecture`, `work` (one step's workload, as
    `memory_plan.run_workload` gives it) and `capacity` (bytes of one GPU) are given."""
    where = f"agents.{agent}.options"
    engine = engine_options(options, where)
    device = str(options.get("device", "cpu"))
    cuda = device.startswith("cuda")
    try:
        sleep = engine.sleeps("cuda" if cuda else device.partition(":")[0])
    except OptionError as error:
        raise error.at(where, OPTION_PREFIX) from None
    tp = engine_parallelism(where, engine, ranks)
    max_model_len = engine.max_model_len or engine.max_prompt_tokens + max_new_tokens
    if max_model_len <= max_new_tokens:
        raise ConfigError(
            f"{where}.vllm_max_model_len: {max_model_len} leaves no room for a prompt beside "
            f"sampling.max_new_tokens {max_new_tokens}"
        )
    settings = dict(
        max_model_len=max_model_len,
        tensor_parallel_size=tp,
        sleep_mode=sleep,
        data_parallel_size=engine.data_parallel_size,
        gpu_memory_utilization=None,
        kv_cache_bytes=None,
        kv_tokens=None,
        engine_weight_bytes=None,
        trainer_bytes=None,
    )
    if not cuda:
        return EngineSettings(**settings)
    settings["gpu_memory_utilization"] = engine.gpu_memory_utilization
    if architecture is None or work is None or capacity is None:
        return EngineSettings(**settings)
    policy = memory_plan.policy_options(options)
    dtype = policy.autocast or policy.dtype
    weights = architecture.params * ENGINE_DTYPE_BYTES[dtype] / tp
    share = engine.gpu_memory_utilization * capacity
    kv = share - weights
    per_token = kv_bytes_per_token(architecture, ENGINE_DTYPE_BYTES[dtype], tp)
    if kv < max_model_len * per_token:
        raise ConfigError(
            f"{where}.vllm_gpu_memory_utilization: {engine.gpu_memory_utilization} of "
            f"{capacity / GIB:.1f} GiB is {share / GIB:.2f} GiB, below the engine's weights "
            f"({weights / GIB:.2f} GiB per GPU at tp {tp}) plus one {max_model_len}-token "
            f"sequence's KV ({max_model_len * per_token / GIB:.2f} GiB); raise it"
        )
    plan = memory_plan.plan_policy(architecture, policy, work)
    resident, update_peak = rank_update_peak(plan, ranks)
    trainer = resident if sleep else update_peak
    usable = capacity - memory_plan.RESERVE_BYTES
    if trainer + share > usable:
        held = "resident state while it generates" if sleep else "update peak (no sleep mode)"
        raise ConfigError(
            f"{where}.vllm_gpu_memory_utilization: {engine.gpu_memory_utilization} x "
            f"{capacity / GIB:.1f} GiB = {share / GIB:.2f} GiB plus the trainer's {held} "
            f"{trainer / GIB:.2f} GiB per rank exceeds {usable / GIB:.1f} GiB usable; lower it"
        )
    settings.update(
        kv_cache_bytes=kv,
        kv_tokens=int(kv // per_token),
        engine_weight_bytes=weights,
        trainer_bytes=trainer,
    )
    return EngineSettings(**settings)
