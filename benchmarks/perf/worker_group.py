"""A worker group of 2 ranks per agent against 1 rank, on the same GRAFT run (CPU, gloo).

The tiny pair (by default) is trained with `ray.ranks_per_agent: 1` and `2` in
alternating runs (1, 2, 1, 2, ...), one torch thread per rank, so drift of a shared
machine hits both alike. Step 0 of every run is warm-up and left out; the report gives
the median seconds of a step and of each loop phase (rollout, update, ...), and the
ratio 2 ranks / 1 rank, with the range over runs, and the machine's 1-minute load average
before and after (a shared machine's load moves the numbers), and the machine's cores
against the rank processes: 2 agents x 2 ranks is 4 processes, on two cores 2 per core.

`--split` also divides each remote method's time per step (`generate`: the rollout phase,
`score`: scoring, `update`: update) into the slowest rank's collectives, its compute, the
profiler's own cost on it, and the driver's overhead (fan-out, object-store copies,
scatter and merge of rows): `algorithms.training.ray.call_timing`, which profiles every
rank call (`GroupPolicy.time_calls`). Each part is a median of its own (per step, then
over runs), so the parts add up to the driver wall only roughly. The profiler slows the
ranks: the step times and ratio of a `--split` run are those of profiled runs (its own
bookkeeping is the "rank_profiler" part); without `--split` nothing is profiled.

    python -m benchmarks.perf.worker_group [--pairs 2] [--steps 3] [--batch-size 8] [--split]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

import benchmarks  # noqa: F401  (OpenMP defaults before torch)
from algorithms.training.ray.call_timing import PARTS, split
from benchmarks.perf.common import procedural_run
from graft_env.policies.tiny.build import build_tiny_pair


def run_times(run_dir: Path, models: dict[str, Path], ranks: int, args) -> list[dict]:
    """Per-step phase seconds of one fresh run with `ranks` ranks per agent; with
    `args.split` also "method/part" seconds (`call_timing.split`) of every remote method."""
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
    policies = list(trainer.policies.values())
    if args.split:
        for policy in policies:
            policy.time_calls()
    times = []
    while trainer.step < config.steps:
        record = trainer.run_step()
        times.append({**record.timings, "step": sum(record.timings.values())})
        if args.split:
            calls = [call for policy in policies for call in policy.call_times]
            for policy in policies:
                policy.call_times.clear()
            for method, parts in split(calls).items():
                times[-1].update({f"{method}/{part}": seconds for part, seconds in parts.items()})
    for policy in policies:
        policy.group.shutdown()
    return times[1:] or times


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the median over `rows`; a row without the key (a phase or method its step
    did not run) counts 0 s."""
    keys = dict.fromkeys(key for row in rows for key in row)
    return {key: statistics.median(row.get(key, 0.0) for row in rows) for key in keys}


def split_table(overall: dict[str, float]) -> dict[str, dict[str, float]]:
    """{method: {part: seconds}} from one rank count's "method/part" medians."""
    methods = dict.fromkeys(key.split("/")[0] for key in overall if "/" in key)
    return {m: {part: overall.get(f"{m}/{part}", 0.0) for part in PARTS} for m in methods}


def print_report(summary: dict, overall: dict[int, dict[str, float]]) -> None:
    """The phase lines, the split table (with `--split`), the cores and the ratio."""
    for phase in dict.fromkeys([*overall[1], *overall[2]]):
        if "/" not in phase:
            one, two = overall[1].get(phase, 0.0), overall[2].get(phase, 0.0)
            print(f"{phase:>24}: 1 rank {one:7.3f} s   2 ranks {two:7.3f} s")
    if "split" in summary:
        tables = summary["split"]
        print(f"{'method':>10} ranks " + " ".join(f"{part:>16}" for part in PARTS))
        for method in dict.fromkeys([*tables["ranks_1"], *tables["ranks_2"]]):
            for ranks in (1, 2):
                parts = tables[f"ranks_{ranks}"].get(method, dict.fromkeys(PARTS, 0.0))
                cells = " ".join(f"{parts[part]:16.3f}" for part in PARTS)
                print(f"{method:>10} {ranks:>5} {cells}")
    cores, processes = summary["cores"], summary["rank_processes"]
    print(
        f"{cores} core(s): {processes['ranks_1']} rank processes with 1 rank per agent, "
        f"{processes['ranks_2']} with 2 ({processes['ranks_2'] / cores:.1f} per core), "
        "1 torch thread each"
    )
    low, high = summary["ratio_range"]
    load_before, load_after = summary["load_average_1min"]
    print(
        f"step ratio 2/1 ranks: {summary['ratio_step']:.2f} (range {low:.2f}-{high:.2f} over "
        f"{len(summary['ranks_1'])} pair(s)); 1-min load average {load_before:.1f} before, "
        f"{load_after:.1f} after"
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="alternating (1, 2) run pairs")
    parser.add_argument("--steps", type=int, default=3, help="steps per run (first: warm-up)")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per step")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--split", action="store_true", help="profile the ranks: each call's time split"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = parser.parse_args(argv)
    models = build_tiny_pair(None, 0)
    cores = len(os.sched_getaffinity(0))
    load_before = os.getloadavg()[0]
    runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as root:
        for pair in range(args.pairs):
            for ranks in (1, 2):
                runs[ranks].append(
                    medians(run_times(Path(root) / f"{pair}-{ranks}", models, ranks, args))
                )
    ratios = [two["step"] / one["step"] for one, two in zip(runs[1], runs[2], strict=True)]
    overall = {ranks: medians(runs[ranks]) for ranks in (1, 2)}
    summary = {
        "ranks_1": runs[1],
        "ranks_2": runs[2],
        "ratio_step": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "cores": cores,
        "rank_processes": {f"ranks_{ranks}": ranks * len(models) for ranks in (1, 2)},
    }
    if args.split:
        summary["split"] = {f"ranks_{ranks}": split_table(overall[ranks]) for ranks in (1, 2)}
    print_report(summary, overall)
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
