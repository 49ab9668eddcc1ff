"""Whether a run fits its GPUs, before anything launches: the one-line refusal that `graft
plan` exits 2 with and `graft train` stops on.

One process per agent is judged on its unsharded plan (`memory_plan.DevicePlan.refusal`). A
worker group (`ray.ranks_per_agent` > 1) is judged on one GPU of each agent through the
engine lifecycle (`memory_plan.lifecycle`: its FSDP2 rank's shards and transients, what the
caching allocator keeps, the vLLM worker beside it awake or asleep, the sync's buffers, the
contexts, NCCL and CUDA-graph reserves), in its busiest phase.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from algorithms.training import memory_plan
from algorithms.training.memory_plan import GIB, DevicePlan, PolicyPlan, Workload
from algorithms.training.memory_plan.lifecycle import GpuPlan, rank_gpu_plan
from algorithms.training.ray.options import parse_ray_options
from algorithms.training.step_time.gpu_memory import agent_engine_memory, lifecycle_engine

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


def agent_gpu_plan(
    config: TrainConfig,
    work: Workload,
    device: DevicePlan,
    agent: tuple[int, str, PolicyPlan],
    ranks: int,
) -> GpuPlan:
    """One GPU of worker-group agent `agent` (index, name, one process's plan) over `ranks`
    ranks, through the engine lifecycle (`memory_plan.lifecycle`); an agent sampling with
    vLLM has its engine's worker beside each rank."""
    index, _, plan = agent
    engine = None
    if config.agents[index].options.get("rollout_backend") == "vllm":
        memory = agent_engine_memory(config, index, plan, ranks, work, device.capacity)
        if memory is not None:
            engine = lifecycle_engine(config, index, plan, memory)
    return rank_gpu_plan(plan, ranks, engine)


def _agent_refusal(
    config: TrainConfig,
    work: Workload,
    device: DevicePlan,
    agent: tuple[int, str, PolicyPlan],
    ranks: int,
) -> str | None:
    index, name, _ = agent
    gpu = agent_gpu_plan(config, work, device, agent, ranks)
    phase = gpu.peak_phase()
    peak, usable = gpu.total(phase), device.usable
    if peak <= usable:
        return None
    where = (
        f"{name} needs {peak / GIB:.1f} GiB per GPU on {device.device} x {ranks} FSDP2 ranks "
        f"({usable / GIB:.1f} GiB usable) in {phase}"
    )
    tunable = [row for row in gpu.rows if row.knob and row.cells.get(phase)]
    largest = max(tunable, key=lambda row: row.cells[phase])
    if peak - largest.cells[phase] >= usable:
        return (
            f"ray.ranks_per_agent: {where}; its state per GPU without {largest.name} does not "
            "fit either: more ranks per agent (with ray.num_gpus_per_agent), or a larger device"
        )
    return (
        f"agents.{index}.options.{largest.knob}: {where}, {largest.name} "
        f"{largest.cells[phase] / GIB:.1f} GiB; lower {largest.knob}"
    )
