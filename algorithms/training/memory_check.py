"""Whether a run fits its GPUs, before anything launches: the one-line refusal that `graft
plan` exits 2 with and `graft train` stops on.

One process per agent is judged on its unsharded plan (`memory_plan.DevicePlan.refusal`). A
worker group (`ray.ranks_per_agent` > 1) is judged on each agent's per-GPU FSDP2 figures
(`step_time.gpu_memory.per_gpu_bytes`; an agent sampling with vLLM generates within its
trainer state plus the engine's share), as its ranks hold it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from algorithms.training import memory_plan
from algorithms.training.memory_plan import GIB, DevicePlan, PolicyPlan, Workload
from algorithms.training.ray.engine_settings import engine_options
from algorithms.training.ray.options import parse_ray_options
from algorithms.training.step_time.gpu_memory import agent_engine_memory, per_gpu_bytes

if TYPE_CHECKING:
    from algorithms.training.run_config import TrainConfig


def check_before_launch(config: TrainConfig, prompt_tokens: int = 1024) -> list[DevicePlan]:
    """`graft train`'s check on a GPU machine: every GPU agent's plan on the GPUs found;
    raises ValueError (one line) when one does not fit (`check_plans`). Nothing on a machine
    without CUDA or in a run without GPU agents (a Ray driver sees its node's GPUs, as its
    actors do)."""
    capacity, count = memory_plan.found_gpus()
    if not count:
        return []
    work = memory_plan.run_workload(config, prompt_tokens)
    try:
        plans = memory_plan.plan_run(config, work, capacity, count)
    except memory_plan.UnknownArchitecture as err:
        logging.getLogger(__name__).warning("memory plan skipped: %s", err)
        return []
    check_plans(config, work, plans)
    return plans


def worker_group_ranks(config: TrainConfig) -> int | None:
    """`ray.ranks_per_agent` of a Ray config (a worker group of FSDP2 ranks per agent), else
    None (one process per agent)."""
    return parse_ray_options(config.ray).ranks_per_agent if config.backend == "ray" else None


def check_plans(config: TrainConfig, work: Workload, plans: Sequence[DevicePlan]) -> None:
    """Raise ValueError (one line) when `config` does not fit: a worker group's agents on
    each of their GPUs, sharded (`sharded_refusal`); otherwise every device's plan
    (`memory_plan.check_run`)."""
    ranks = worker_group_ranks(config)
    if plans and ranks is not None and ranks > 1:
        refusal = sharded_refusal(config, work, plans, ranks)
        if refusal is not None:
            raise ValueError(refusal)
        return
    memory_plan.check_run(plans)


def sharded_refusal(
    config: TrainConfig, work: Workload, devices: Sequence[DevicePlan], ranks: int
) -> str | None:
    """The first agent of a worker-group `config` whose busiest phase on one of its `ranks`
    GPUs exceeds the usable memory, as one line naming the option to change; None when every
    agent fits."""
    for device in devices:
        for index, name, plan in device.agents:
            refusal = _agent_refusal(config, work, device, (index, name, plan), ranks)
            if refusal is not None:
                return refusal
    return None


def _agent_refusal(
    config: TrainConfig,
    work: Workload,
    device: DevicePlan,
    agent: tuple[int, str, PolicyPlan],
    ranks: int,
) -> str | None:
    index, name, _ = agent
    phases, tunable = _per_gpu_phases(config, work, device, agent, ranks)
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


def _per_gpu_phases(
    config: TrainConfig,
    work: Workload,
    device: DevicePlan,
    agent: tuple[int, str, PolicyPlan],
    ranks: int,
) -> tuple[dict[str, float], dict[str, list[tuple[str, float, str]]]]:
    """Agent's bytes per GPU per phase and, per phase, its terms an option tunes (name,
    bytes, option); an agent sampling with vLLM has 'generate (vLLM)' (the trainer state plus
    the engine's share) in place of the transformers generate phase."""
    index, _, plan = agent
    phases = per_gpu_bytes(plan, ranks)
    tunable = {p: [(t.name, t.bytes, t.knob) for t in plan.phases[p] if t.knob] for p in phases}
    options = config.agents[index].options
    if options.get("rollout_backend") != "vllm":
        return phases, tunable
    engine = agent_engine_memory(config, index, plan, ranks, work, device.capacity)
    if engine is None:
        return phases, tunable
    del phases["generate"], tunable["generate"]
    fixed_kv = engine_options(options, f"agents.{index}.options").kv_cache_gib is not None
    term = ("the vLLM engine's share", engine.engine_bytes)
    knob = "vllm_kv_cache_gib" if fixed_kv else "vllm_gpu_memory_utilization"
    if not engine.sleep_mode:  # the engine stays on the GPU beside scoring and the update
        for phase in phases:
            phases[phase] += engine.engine_bytes
            tunable[phase].append((*term, knob))
    phases["generate (vLLM)"] = engine.sampling_bytes
    tunable["generate (vLLM)"] = [(*term, knob)]
    return phases, tunable
