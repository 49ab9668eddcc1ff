"""`graft plan`: the memory plan of a run config on its GPUs, before anything loads.

Per device: weights, AdamW moments, gradients, autocast's weight copies, activations (with
and without gradient checkpointing), the log-prob logits and the KV caches of generation and
scoring, per phase of a step (`algorithms.training.memory_plan`), and what the plan assumes.
A config that does not fit ends with one line naming the option to change (exit status 2).
For a worker-group config (`ray.ranks_per_agent` > 1) these tables size one unsharded process
per agent and say so: the run's own layout is the per-GPU table of each agent after the
estimate, through the engine lifecycle (load, generate, score, update, wake weights, sync, wake
kv: `memory_plan.lifecycle`), and that table is what the refusal judges
(`memory_check.sharded_refusal`).

For a run on GPUs it then estimates one step's time per phase (rollout with either backend,
verify, scoring, update, weight sync, exchange) and each GPU's memory when an agent is sharded
over its GPUs (`algorithms.training.step_estimate`, whose docstring lists the assumptions),
beside the paper stack's ~2.5-4 min per step.
"""

from __future__ import annotations

import argparse
import os

from algorithms.training import memory_check, memory_plan, step_estimate
from algorithms.training.memory_plan import lifecycle, process, reserves
from algorithms.training.ray.engine_settings import engine_options
from algorithms.training.run_config import load_config
from algorithms.training.step_time import anchors, gpu_memory, table, workload

DEFAULT_PROMPT_TOKENS = 1024


def add_parser(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser(
        "plan",
        help="the memory plan of a run config per GPU; refuses one that does not fit",
        description="Size what every policy holds on its GPU in each phase of a step, from "
        "the model configs alone (no weights are loaded, nothing is downloaded, no benchmark "
        "data is read).",
    )
    plan.add_argument("config", help="YAML run config")
    plan.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    plan.add_argument(
        "--gpu-memory",
        type=float,
        default=None,
        metavar="GIB",
        help="memory of each GPU in GiB (default: the devices torch.cuda finds)",
    )
    plan.add_argument(
        "--gpus", type=int, default=None, help="GPUs on the node (default: those found, else 8)"
    )
    plan.add_argument(
        "--prompt-tokens",
        type=int,
        default=DEFAULT_PROMPT_TOKENS,
        help=f"the longest prompt assumed, in tokens (default: {DEFAULT_PROMPT_TOKENS})",
    )
    plan.add_argument(
        "--gpu-kind",
        choices=sorted(anchors.GPUS),
        default=None,
        help="the GPU the step estimate assumes (default: h200 from 100 GiB on, else h100-80gb)",
    )
    plan.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.overrides, read_data=False)  # sizes need no data
    capacity, count = (args.gpu_memory or 0.0) * memory_plan.GIB, args.gpus
    if args.gpu_memory is None:
        capacity, found = memory_plan.found_gpus()
        if not found:
            raise ValueError("--gpu-memory: no GPU found here; give each GPU's memory in GiB")
        count = count or found
    work = memory_plan.run_workload(config, args.prompt_tokens)
    plans = memory_plan.plan_run(config, work, capacity, count or 8)
    options = [(a.name, memory_plan.policy_options(a.options)) for a in config.agents]
    print(f"{args.config}: {count or 8} GPU(s) of {capacity / memory_plan.GIB:.1f} GiB")
    print("\n".join(memory_plan.assumption_lines(work, options)))
    ranks = memory_check.worker_group_ranks(config)
    if plans and ranks is not None and ranks > 1:
        print(unsharded_heading(ranks))
    for plan in plans:
        vllm = [] if ranks else memory_check.one_process_vllm_agents(config, plan)
        print("\n".join(memory_plan.format_plan(plan, ranks, [name for _, name, _ in vllm])))
    group = bool(plans) and ranks is not None and ranks > 1
    if plans:
        print("\n".join(estimate_lines(config, work, capacity, args.gpu_kind, not group)))
    if group:
        print("\n".join(group_lines(config, work, plans, ranks)))
    elif ranks is None:
        for line in process_lines(config, work, plans):
            print(line)
    vllm_agents = [a.name for a in config.agents if a.options.get("rollout_backend") == "vllm"]
    advice = memory_plan.allocator_advice(vllm_agents, memory_plan.VLLM_FLOOR, os.environ)
    if advice:
        print(advice)
    memory_check.check_plans(config, work, plans)
    return 0


def unsharded_heading(ranks: int) -> str:
    """The line above the per-device tables of a worker-group config: they size one process
    per agent holding its whole state, which is not how its `ranks` FSDP2 ranks hold it."""
    return (
        "one process per agent, unsharded: not this run's layout (its "
        f"{ranks} FSDP2 ranks per agent shard the state; see the per-GPU lifecycle tables below)"
    )


def group_lines(
    config, work: memory_plan.Workload, plans: list[memory_plan.DevicePlan], ranks: int
) -> list[str]:
    """A worker group's per-GPU tables through the engine lifecycle, one per agent: what the
    refusal judges (`memory_check.agent_gpu_plan`)."""
    lines = [
        "per GPU of each worker group, through the engine lifecycle (memory_plan.lifecycle): "
        "load; generate; the engine asleep through score and update; empty_cache; wake "
        "weights; sync; empty_cache; wake kv. Reserves (memory_plan.reserves): CUDA context "
        f"{reserves.CUDA_CONTEXT_BYTES / memory_plan.GIB:.1f} GiB per process, NCCL "
        f"{reserves.NCCL_COMMUNICATOR_BYTES / memory_plan.GIB:.1f} GiB per communicator, vLLM's "
        f"CUDA graphs {reserves.CUDA_GRAPH_POOL_BYTES / memory_plan.GIB:.1f} GiB; usable = total "
        f"less {reserves.RESERVE_BYTES / memory_plan.GIB:.1f} GiB (the trainer's context and "
        "allocator slack)"
    ]
    for device in plans:
        for agent in device.agents:
            gpu = memory_check.agent_gpu_plan(config, work, device, agent, ranks)
            heading = lifecycle.rank_heading(agent[1], gpu, ranks)
            lines += lifecycle.format_gpu_plan(heading, gpu, device.usable)
    return lines


def process_lines(config, work: memory_plan.Workload, plans: list[memory_plan.DevicePlan]):
    """The GPU of each one-process agent sampling with vLLM, through the engine lifecycle
    beside its engine (`memory_plan.process`): what the refusal judges for it."""
    lines = []
    for device in plans:
        for index, name, _ in memory_check.one_process_vllm_agents(config, device):
            gpu = memory_check.process_agent_plan(config, work, device, index)
            engine = memory_check.process_engine(config, work, device, index)
            heading = process.process_heading(name, device.device, engine)
            lines += lifecycle.format_gpu_plan(heading, gpu, device.usable)
    return lines


def estimate_agents(
    config, work: memory_plan.Workload
) -> tuple[list[workload.Agent], list[tuple[memory_plan.PolicyPlan, int]]]:
    """The step estimate's agents of `config` and, per agent, (its memory plan for `work`,
    its GPUs): a worker group shards over `ray.ranks_per_agent` GPUs (and runs vLLM at
    that TP); one process per agent computes on one GPU."""
    ranks = memory_check.worker_group_ranks(config)
    gpus = ranks or 1
    agents, plans = [], []
    for index, agent in enumerate(config.agents):
        options = memory_plan.policy_options(agent.options)
        arch = memory_plan.architecture_of(agent.model, f"agents.{index}.model")
        backend = str(agent.options.get("rollout_backend", "transformers"))
        engine = engine_options(agent.options, f"agents.{index}.options")
        agents.append(
            workload.Agent(
                agent.name,
                arch,
                options,
                gpus,
                bool(ranks),
                backend,
                max_num_seqs=engine.max_num_seqs,
                sync_bucket_mb=engine.sync_bucket_mb,
            )
        )
        plans.append((memory_plan.plan_policy(arch, options, work), gpus))
    return agents, plans


def engine_memory(
    config, work: memory_plan.Workload, capacity: float, plans
) -> list[gpu_memory.EngineMemory | None]:
    """Per agent, `gpu_memory.agent_engine_memory` for its (plan, GPUs) in `plans`."""
    return [
        gpu_memory.agent_engine_memory(config, index, plan, gpus, work, capacity)
        for index, (plan, gpus) in enumerate(plans)
    ]


def estimate_lines(
    config, work: memory_plan.Workload, capacity: float, kind: str | None, memory: bool = True
) -> list[str]:
    """The step estimate of `config` on GPUs of `capacity` bytes, then (`memory`) each agent's
    memory on its GPU beside a vLLM engine's share (one process per agent; a worker group's
    GPUs are `group_lines`)."""
    from algorithms import configure

    algorithm = configure(config.algorithm, **config.algorithm_options)
    step = workload.StepWorkload(
        prompts=config.env.batch_size,
        n=algorithm.n,
        num_minibatches=algorithm.num_minibatches,
        mix=workload.LengthMix(cap=config.sampling.max_new_tokens),
    )
    gpu = anchors.gpu_for(capacity / memory_plan.GIB, kind)
    agents, plans = estimate_agents(config, work)
    engines = engine_memory(config, work, capacity, plans)
    kv = [None if e is None else e.kv_bytes for e in engines]
    together = config.backend == "ray"  # actors of their own: agents at once (A11)
    estimate = step_estimate.estimate_step(agents, gpu, step, kv, together=together)
    lines = table.assumption_lines(gpu, step, together=together)
    lines += table.format_estimate(estimate)
    fast, slow = step_estimate.estimate_bounds(agents, gpu, step, kv, together=together)
    lines += table.format_range(estimate, fast, slow)
    if not memory:
        return lines
    gib = memory_plan.GIB
    lines.append(
        f"  {'GiB per GPU (FSDP2 shards / GPUs)':<34}"
        + "".join(f"{phase:>10}" for phase in memory_plan.PHASES)
        + f"{'vLLM gen':>10}{'KV free':>10}  (vLLM: trainer state + the engine's share)"
    )
    for agent, (plan, k), engine in zip(agents, plans, engines, strict=True):
        phases = gpu_memory.per_gpu_bytes(plan, k)
        cells = "".join(f"{phases[p] / gib:>10.1f}" for p in memory_plan.PHASES)
        if engine is None:
            cells += f"{'-':>10}{'-':>10}"
        else:
            cells += f"{engine.sampling_bytes / gib:>10.1f}{engine.kv_bytes / gib:>10.1f}"
        label = f"{agent.name}, {k} GPU(s)"
        lines.append(f"    {label:<32}{cells}")
    return lines
