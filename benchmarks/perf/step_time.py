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

from benchmarks.perf.common import LOOP_PHASES, add_threads_option, step_phase_times
from graft_env.policies.loading import DTYPES


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3, help="GRPO/GRAFT run pairs")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--models", nargs=2, default=["tiny-a", "tiny-b"])
    add_threads_option(parser)
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
                steps = step_phase_times(
                    algorithm,
                    Path(tmp) / f"{algorithm}-{pair}",
                    args.models,
                    steps=args.steps,
                    batch_size=args.batch_size,
                    n=args.n,
                    max_new_tokens=args.max_new_tokens,
                    device=args.device,
                    dtype=args.dtype,
                    autocast=args.autocast,
                )
                times[algorithm] += steps
                print(f"pair {pair} {algorithm}: " + ", ".join(f"{s['step']:.2f}s" for s in steps))
    print(f"\nmedian seconds per step ({len(times['grpo'])} steps each)")
    print(f"{'phase':<10}{'grpo':>10}{'graft':>10}{'ratio':>8}")
    for phase in (*LOOP_PHASES, "step"):
        grpo = statistics.median(s[phase] for s in times["grpo"])
        graft = statistics.median(s[phase] for s in times["graft"])
        ratio = f"{graft / grpo:.2f}" if grpo > 0 else "-"
        print(f"{phase:<10}{grpo:>10.3f}{graft:>10.3f}{ratio:>8}")


if __name__ == "__main__":
    main()
