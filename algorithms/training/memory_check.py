"""Whether a run fits its GPUs, before anything launches: the one-line refusal that `graft
plan` exits 2 with and `graft train` stops on.

One process per agent is judged on its unsharded plan (`memory_plan.DevicePlan.refusal`),
except one that samples with vLLM: its GPU is judged through the same engine lifecycle with
one process (`memory_plan.process`: the trainer's whole state, the engine's share where it is
awake, the whole-model staging buffer from the first sync on, its context and CUDA graphs). A
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
from algorithms.training.memory_plan.lifecycle import Engine, GpuPlan, rank_gpu_plan
from algorithms.training.memory_plan.process import process_gpu_plan
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
    each of their GPUs, sharded (`sharded_refusal`); a one-process agent sampling with vLLM
    on its GPU beside its engine (`device_refusal`); otherwise every device's plan
    (`DevicePlan.refusal`)."""
    ranks = worker_group_ranks(config)
    if plans and ranks is not None and ranks > 1:
        refusal = sharded_refusal(config, work, plans, ranks)
    else:
        refusals = (device_refusal(config, work, device, ranks) for device in plans)
        refusal = next((r for r in refusals if r is not None), None)
    if refusal is not None:
        raise ValueError(refusal)


def device_refusal(
    config: TrainConfig, work: Workload, device: DevicePlan, ranks: int | None
) -> str | None:
    """One device of a config without FSDP2 groups: each one-process vLLM agent on it judged
    through its lifecycle table (`process_gpu_plan`, the device's other policies beside it),
    a device without one by its unsharded plan."""
    agents = one_process_vllm_agents(config, device) if ranks is None else []
    if not agents:
        return device.refusal()
    for index, name, _ in agents:
        gpu = process_agent_plan(config, work, device, index)
        refusal = _gpu_refusal(
            index,
            gpu,
            device.usable,
            f"{name} needs {{peak}} GiB on {device.device} beside "
            f"its vLLM engine ({device.usable / GIB:.1f} GiB usable) in {{phase}}",
            f"agents.{index}.model: {{where}}; its state{{without}} does not fit either",
            "a larger device, or a worker group (ray.ranks_per_agent)",
        )
        if refusal is not None:
            return refusal
    return None


def one_process_vllm_agents(
    config: TrainConfig, device: DevicePlan
) -> list[tuple[int, str, PolicyPlan]]:
    """The agents on `device` that sample with a vLLM engine of their own (`VLLMPolicy`)."""
    return [
        a for a in device.agents if config.agents[a[0]].options.get("rollout_backend") == "vllm"
    ]


def process_agent_plan(
    config: TrainConfig, work: Workload, device: DevicePlan, index: int
) -> GpuPlan:
    """The GPU of one-process vLLM agent `index` on `device` (`memory_plan.process`), with
    the peaks of the device's other policies beside it."""
    engine = process_engine(config, work, device, index)
    vllm = {i for i, _, _ in one_process_vllm_agents(config, device)}
    beside = 0.0
    for other in (a for a in device.agents if a[0] != index):
        if other[0] in vllm:
            alone = process_gpu_plan(other[2], process_engine(config, work, device, other[0]))
            beside += alone.total(alone.peak_phase())
        else:
            beside += DevicePlan(device.device, device.capacity, (other,)).peak
    plan = next(p for i, _, p in device.agents if i == index)
    return process_gpu_plan(plan, engine, beside)


def process_engine(config: TrainConfig, work: Workload, device: DevicePlan, index: int) -> Engine:
    """Agent `index`'s engine on its one GPU (TP from its options), as `process_gpu_plan`
    takes it."""
    plan = next(p for i, _, p in device.agents if i == index)
    memory = agent_engine_memory(config, index, plan, 1, work, device.capacity)
    if memory is None:
        raise ValueError(f"agents.{index}.options.device: the vLLM engine is planned on CUDA only")
    return lifecycle_engine(config, index, plan, memory)


def sharded_refusal(
    config: TrainConfig, work: Workload, devices: Sequence[DevicePlan], ranks: int
) -> str | None:
    """The first agent of a worker-group `config` whose busiest phase on one of its `ranks`
    GPUs exceeds the usable memory, as one line naming the option to change; None when every
    agent fits."""
    for device in devices:
        for index, name, plan in device.agents:
            gpu = agent_gpu_plan(config, work, device, (index, name, plan), ranks)
            refusal = _gpu_refusal(
                index,
                gpu,
                device.usable,
                f"{name} needs {{peak}} GiB per GPU on "
                f"{device.device} x {ranks} FSDP2 ranks ({device.usable / GIB:.1f} GiB usable) "
                "in {phase}",
                "ray.ranks_per_agent",
                "more ranks per agent (with ray.num_gpus_per_agent), or a larger device",
            )
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


def _gpu_refusal(
    index: int, gpu: GpuPlan, usable: float, where: str, state: str, state_fix: str
) -> str | None:
    """None when `gpu`'s busiest phase fits `usable` bytes; else one line: `where` (with
    {peak} and {phase}) and the largest tunable row of that phase, or `state` (with {where}
    and {without}) and `state_fix` when the phase does not fit even without that row."""
    phase = gpu.peak_phase()
    peak = gpu.total(phase)
    if peak <= usable:
        return None
    where = where.format(peak=f"{peak / GIB:.1f}", phase=phase)
    tunable = [row for row in gpu.rows if row.knob and row.cells.get(phase)]
    largest = max(tunable, key=lambda row: row.cells[phase], default=None)
    if largest is None or peak - largest.cells[phase] >= usable:
        without = f" without {largest.name}" if largest is not None else ""
        return f"{state.format(where=where, without=without)}: {state_fix}"
    return (
        f"agents.{index}.options.{largest.knob}: {where}, {largest.name} "
        f"{largest.cells[phase] / GIB:.1f} GiB; lower {largest.knob}"
    )
