"""`graft plan`: the memory plan of a run config on its GPUs, before anything loads.

Per device: weights, AdamW moments, gradients, autocast's weight copies, activations (with
and without gradient checkpointing), the log-prob logits and the KV caches of generation and
scoring, per phase of a step (`algorithms.training.memory_plan`), and what the plan assumes.
A config that does not fit ends with one line naming the option to change (exit status 2).
"""

from __future__ import annotations

import argparse

from algorithms.training import memory_plan
from algorithms.training.run_config import load_config

DEFAULT_PROMPT_TOKENS = 1024


def add_parser(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser(
        "plan",
        help="the memory plan of a run config per GPU; refuses one that does not fit",
        description="Size what every policy holds on its GPU in each phase of a step, from "
        "the model configs alone (no weights are loaded, nothing is downloaded).",
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
    plan.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.overrides)
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
    for plan in plans:
        print("\n".join(memory_plan.format_plan(plan)))
    hint = memory_plan.allocator_hint()
    if hint:
        print(hint)
    memory_plan.check_run(plans)
    return 0
