"""A worker group of 2 ranks per agent against 1 rank, on the same GRAFT run (CPU, gloo).

The tiny pair (by default) is trained with `ray.ranks_per_agent: 1` and `2` in
alternating runs (1, 2, 1, 2, ...), one torch thread per rank, so drift of a shared
machine hits both alike. Step 0 of every run is warm-up and left out; the report gives
the median seconds of a step and of each loop phase (rollout, update, ...), and the
ratio 2 ranks / 1 rank, with the range over runs, and the machine's 1-minute load average
before and after (a shared machine's load moves the numbers). What is inside a phase
(collectives, all-gathers of log-probs, object-store copies) is not split further here.

    python -m benchmarks.perf.worker_group [--pairs 2] [--steps 3] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

import benchmarks  # noqa: F401  (OpenMP defaults before torch)
from benchmarks.perf.common import procedural_run
from graft_env.policies.tiny.build import build_tiny_pair


def run_times(run_dir: Path, models: dict[str, Path], ranks: int, args) -> list[dict]:
    """Per-step phase seconds of one fresh run with `ranks` ranks per agent."""
    from algorithms.training.loop import Trainer

    agents = [
        {"name": name, "model": str(path), "options": {"lr": 1e-4, "generation_batch_size": 8}}
        for name, path in models.items()
    ]
    config = procedural_run(
        agents,
        "graft",
        run_dir,
        steps=args.steps,
        batch_size=args.batch_size,
        n=4,
        max_new_tokens=args.max_new_tokens,
        dataset_options={"size": 200, "difficulty": 1},
        backend="ray",
        ray={
            "num_cpus": 2 * len(models),
            "num_cpus_per_agent": ranks,
            "torch_threads": 1,
            "ranks_per_agent": ranks,
        },
    )
    trainer = Trainer(config)
    trainer.open()
    times = []
    while trainer.step < config.steps:
        record = trainer.run_step()
        times.append({**record.timings, "step": sum(record.timings.values())})
    for policy in trainer.policies.values():
        policy.group.shutdown()
    return times[1:] or times


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="alternating (1, 2) run pairs")
    parser.add_argument("--steps", type=int, default=3, help="steps per run (first: warm-up)")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per step")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = parser.parse_args(argv)
    models = build_tiny_pair(None, 0)
    load_before = os.getloadavg()[0]
    medians: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as root:
        for pair in range(args.pairs):
            for ranks in (1, 2):
                steps = run_times(Path(root) / f"{pair}-{ranks}", models, ranks, args)
                medians[ranks].append({k: statistics.median(s[k] for s in steps) for k in steps[0]})
    ratios = [two["step"] / one["step"] for one, two in zip(medians[1], medians[2], strict=True)]
    summary = {
        "ranks_1": medians[1],
        "ranks_2": medians[2],
        "ratio_step": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "load_average_1min": [load_before, os.getloadavg()[0]],
    }
    for phase in medians[1][0]:
        one = statistics.median(m[phase] for m in medians[1])
        two = statistics.median(m.get(phase, 0.0) for m in medians[2])
        print(f"{phase:>24}: 1 rank {one:7.3f} s   2 ranks {two:7.3f} s")
    print(
        f"step ratio 2/1 ranks: {summary['ratio_step']:.2f} (range {min(ratios):.2f}-"
        f"{max(ratios):.2f} over {args.pairs} pair(s)); 1-min load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
