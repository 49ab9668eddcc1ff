"""What the measurement scripts share: the repository root, the loop benchmarks' run config
and step timing, the fixed prompts and batch of the policy benchmarks, the decoding levers of
`HFPolicy.generate` (`lever`), and a device clock.

A benchmark run of the loop is short, trains on the procedural task, checkpoints once at
the end and shows no progress bar or TensorBoard, so what it times is the loop itself.
torch and the loop are imported by the functions that use them: `verifier_throughput` reads
`REPO` here and never loads torch, and the scripts that only sample never load the loop.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from algorithms.training.run_config import TrainConfig, config_from_dict
from graft_env.threads import resolve_threads
from graft_env.types import TrainBatch, TrainSequence

if TYPE_CHECKING:
    import torch

    from graft_env.policies import HFPolicy
    from graft_env.policies.base import Generation

REPO = Path(__file__).resolve().parents[2]
PROBLEMS = [f"Compute {17 * i + 3} + {29 * i + 11}." for i in range(64)]
"""The policy benchmarks' questions (formatted with each model's own template)."""
LOOP_PHASES = ("rollout", "verify", "exchange", "scoring", "update")
"""The loop's timed phases (`StepRecord.timings`) that the step benchmarks report."""
LEVERS = ("packed", "bf16", "inference_mode")
"""Decoding levers of `HFPolicy.generate` (`lever`): the `packed_decode` option, bfloat16
autocast, `torch.inference_mode` instead of `no_grad`."""


def add_threads_option(parser: argparse.ArgumentParser, what: str = "torch threads") -> None:
    """`--threads`, defaulting as `graft train` does ($OMP_NUM_THREADS, else 1), so every
    script measures the loop's default unless told otherwise (README rows name theirs)."""
    parser.add_argument(
        "--threads",
        type=int,
        default=resolve_threads(None),
        help=f"{what} ($OMP_NUM_THREADS, else 1)",
    )


def procedural_run(
    agents: list[dict[str, Any]],
    algorithm: str,
    run_dir: Path,
    *,
    steps: int,
    batch_size: int,
    n: int,
    max_new_tokens: int,
    dataset_options: dict[str, Any],
    **extra: Any,
) -> TrainConfig:
    """`steps` steps of `algorithm` for `agents` (run-config agent entries) on procedural
    prompts drawn with `dataset_options`; `extra` sets further run-config fields."""
    return config_from_dict(
        {
            "agents": agents,
            "algorithm": algorithm,
            "algorithm_options": {"n": n, "num_minibatches": 2},
            "env": {
                "dataset": "procedural",
                "dataset_options": dataset_options,
                "batch_size": batch_size,
            },
            "sampling": {"max_new_tokens": max_new_tokens},
            "steps": steps,
            "run_dir": str(run_dir),
            "checkpoint_every": steps,
            "progress": False,
            "tensorboard": False,
            **extra,
        }
    )


def step_phase_times(
    algorithm: str,
    run_dir: Path,
    models: Sequence[str],
    *,
    steps: int,
    batch_size: int,
    n: int,
    max_new_tokens: int,
    device: str = "cpu",
    dtype: str = "float32",
    autocast: str | None = None,
) -> list[dict[str, float]]:
    """Per-step seconds of every `LOOP_PHASES` phase and the whole "step", of one fresh run
    of `algorithm` training `models` (lr 1e-4) on 500 procedural problems."""
    from algorithms.training.loop import Trainer

    options = {"lr": 1e-4, "device": device, "dtype": dtype, "autocast": autocast}
    agents = [{"name": m, "model": m, "options": dict(options)} for m in models]
    config = procedural_run(
        agents,
        algorithm,
        run_dir,
        steps=steps,
        batch_size=batch_size,
        n=n,
        max_new_tokens=max_new_tokens,
        dataset_options={"size": 500},
    )
    trainer = Trainer(config)
    times = []
    trainer.open()
    synchronize(device)
    while trainer.step < config.steps:
        record = trainer.run_step()
        synchronize(device)  # no queued kernel is counted in the next step
        step = {phase: record.timings.get(phase, 0.0) for phase in LOOP_PHASES}
        step["step"] = sum(record.timings.values())
        times.append(step)
    return times


def grpo_batch(agent: str, prompts: list[str], groups: list[list[Generation]]) -> TrainBatch:
    """One minibatch of every generation, advantages alternating -0.5 / +0.5 in a group."""
    sequences = [
        TrainSequence(p, g.token_ids, g.logprobs, advantage=float(i % 2) - 0.5)
        for p, group in enumerate(groups)
        for i, g in enumerate(group)
    ]
    return TrainBatch(agent, prompts, sequences, [list(range(len(sequences)))])


def synchronize(device: str | torch.device) -> None:
    """Wait for queued kernels on a CUDA device, so the clock sees the work; no-op elsewhere."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def lever(policy: HFPolicy, name: str) -> Iterator[None]:
    """`policy` with one decoding lever applied, restored afterwards ("plain": none)."""
    import torch

    options = policy.options
    try:
        with contextlib.ExitStack() as stack:
            if name == "packed":
                policy.options = dataclasses.replace(options, packed_decode=True)
            elif name == "bf16":
                policy.options = dataclasses.replace(options, autocast="bfloat16")
            elif name == "inference_mode":
                stack.enter_context(torch.inference_mode())
            elif name != "plain":
                raise ValueError(f"unknown lever {name!r}; valid: {list(LEVERS)}")
            yield
    finally:
        policy.options = options
