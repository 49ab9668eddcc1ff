"""Wall time per phase of a GRAFT step against a GRPO step on the same pair and batch.

Both algorithms train the same two policies from the same weights on the same
prompt stream (GRPO: each policy on its own groups, no exchange). Runs alternate
(GRPO, GRAFT, GRPO, ...) so drift of a shared machine hits both alike; the report
gives the median seconds per phase and the ratio GRAFT / GRPO of whole steps.

The loop times its phases itself; each phase ends on host values (token lists,
float losses), and on CUDA the benchmark also waits for the device after every
step, so no queued kernel is counted in the next step.

    python -m benchmarks.perf.step_time [--pairs 3] [--steps 3] [--batch-size 16]
        [--device cuda --dtype bfloat16 | --autocast bfloat16]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from algorithms.loop import Trainer
from benchmarks.perf.common import procedural_run
from benchmarks.perf.policy_throughput import synchronize
from graft_env.policies.hf_options import DTYPES

PHASES = ("rollout", "verify", "exchange", "scoring", "update")


def run_once(algorithm: str, run_dir: Path, args: argparse.Namespace) -> list[dict[str, float]]:
    """Per-step phase times of one fresh run."""
    options = {"lr": 1e-4, "device": args.device, "dtype": args.dtype, "autocast": args.autocast}
    agents = [{"name": m, "model": m, "options": dict(options)} for m in args.models]
    config = procedural_run(
        agents,
        algorithm,
        run_dir,
        steps=args.steps,
        batch_size=args.batch_size,
        n=args.n,
        max_new_tokens=args.max_new_tokens,
        dataset_options={"size": 500},
    )
    trainer = Trainer(config)
    steps = []
    trainer.open()
    synchronize(args.device)
    while trainer.step < config.steps:
        record = trainer.run_step()
        synchronize(args.device)
        times = {phase: record.timings.get(phase, 0.0) for phase in PHASES}
        times["step"] = sum(record.timings.values())
        steps.append(times)
    return steps


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """This script's options; `vs_trl` builds its `run_once` arguments here too, so
    every option has its default there as well."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3, help="GRPO/GRAFT run pairs")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--models", nargs=2, default=["tiny-a", "tiny-b"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help='torch device ("cpu", "cuda", ...)')
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--autocast", default=None, choices=["bfloat16"], help="mixed precision")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    times: dict[str, list[dict[str, float]]] = {"grpo": [], "graft": []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            for algorithm in ("grpo", "graft"):
                steps = run_once(algorithm, Path(tmp) / f"{algorithm}-{pair}", args)
                times[algorithm] += steps
                print(f"pair {pair} {algorithm}: " + ", ".join(f"{s['step']:.2f}s" for s in steps))
    print(f"\nmedian seconds per step ({len(times['grpo'])} steps each)")
    print(f"{'phase':<10}{'grpo':>10}{'graft':>10}{'ratio':>8}")
    for phase in (*PHASES, "step"):
        grpo = statistics.median(s[phase] for s in times["grpo"])
        graft = statistics.median(s[phase] for s in times["graft"])
        ratio = f"{graft / grpo:.2f}" if grpo > 0 else "-"
        print(f"{phase:<10}{grpo:>10.3f}{graft:>10.3f}{ratio:>8}")


if __name__ == "__main__":
    main()
