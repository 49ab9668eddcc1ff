"""The pre-registered library comparison (issue 19; docs/study/LIBRARY-PREREGISTRATION.md).

    python -m benchmarks.study.library_report --grid configs/grids/library.yaml \
        --runs runs/compare/study --out docs/results/library

Per model: each row's mean average pass@1 with its interval, L1 (the library row − the
grid's baseline, GRPO n=8: superiority) and L2 (the library row − the step-aligned stored
row: non-inferiority by 1 point) with the study's paired two-level bootstrap
(`study.stats`); the rows are found by what they read (`library_from`, `stored_peer_from`),
not by their labels. Then the funnel of both stored variants
from the runs' metrics: how many all-fail prompts the library finds, can rescue and rescues
per step, beside what the step-aligned replay transfers, and the admitted share by age.
Writes `report.md` and `report.json`.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.library.staleness import STEP_EDGES, bucket_labels
from benchmarks.compare.grid import GridError, load_grid
from benchmarks.compare.report import cell_records, provenance_summary
from benchmarks.compare.run import finished_results
from benchmarks.study.curves import Logs, funnel, metrics_logs
from benchmarks.study.report import with_build
from benchmarks.study.report_markdown import points
from benchmarks.study.stats import label_interval, paired_difference, verdict

L2_MARGIN = 1.0  # points: the library may trail the step-aligned replay by this much
LOOKUP = (  # library/<name>: counted per step
    "all_fail_prompts",
    "found_prompts",
    "rescuable_prompts",
    "used_groups",
    "rescued_prompts",
)


def lookup_counts(
    results: Sequence[Mapping[str, Any]], logs: Logs, library: str
) -> dict[str, dict]:
    """model -> per lookup count its per-step mean (over steps, then seeds), and the
    admitted share of transferred responses by age bucket (source steps), over all."""
    per_step: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    buckets = bucket_labels(STEP_EDGES)  # youngest first
    by_age: dict[str, dict[str, list[float]]] = defaultdict(
        lambda: {bucket: [0, 0] for bucket in buckets}
    )
    for result in results:
        if result["label"] != library:
            continue
        agent = next(iter(result["models"]))
        rows = [row for row in logs[result["cell"]] if row["agent"] == agent]
        for name in LOOKUP:
            per_step[agent][name].append(float(np.mean([row[f"library/{name}"] for row in rows])))
        for row in rows:
            for key, value in row.items():
                if key.startswith("library/age_steps_") and key.endswith("/transferred"):
                    bucket = key.removeprefix("library/age_steps_").removesuffix("/transferred")
                    by_age[agent][bucket][0] += value
                    by_age[agent][bucket][1] += row[f"library/age_steps_{bucket}/admitted"]
    return {
        agent: {
            "seeds": len(counts["all_fail_prompts"]),
            "per_step": {name: float(np.mean(v)) for name, v in counts.items()},
            "admitted_by_age_steps": {
                bucket: {"transferred": t, "admitted": a, "share": a / t}
                for bucket, (t, a) in by_age[agent].items()
                if t
            },
        }
        for agent, counts in per_step.items()
    }


def analyse(grid_path: str | Path, runs: str | Path, resamples: int = 10_000) -> dict[str, Any]:
    """Everything the report shows, as plain data."""
    grid = load_grid(grid_path)
    library = next((e.label for e in grid.algorithms if e.library_from), None)
    if library is None:
        raise GridError(f"{grid_path}: no algorithm reads a library (library_from)")
    stored = [e.label for e in grid.algorithms if e.stored_peer_from]
    hypotheses = [("L1", grid.baseline, 0.0)] + [("L2", label, L2_MARGIN) for label in stored]
    results = finished_results(grid, runs)
    records = cell_records(results)
    logs = metrics_logs(Path(runs), results)
    boot = {"resamples": resamples}
    # steps as run (None: only base cells finished, and there is no funnel to divide)
    steps = next((r["config"]["steps"] for r in results if r["config"]), None)
    out: dict[str, Any] = {"grid": str(grid_path), "steps": steps, "models": {}}
    for model in sorted({r["model"] for r in records if r["seed"] is not None}):
        present = {r["label"] for r in records if r["model"] == model}
        labels = [e.label for e in grid.algorithms if e.label in present]
        rows = {label: asdict(label_interval(records, model, label, **boot)) for label in labels}
        entry: dict[str, Any] = {"rows": rows, "hypotheses": []}
        for name, baseline, margin in hypotheses:
            if {library, baseline} <= present:
                d = paired_difference(records, model, library, baseline, **boot)
                entry["hypotheses"].append(
                    {
                        "id": name,
                        "contrast": f"{library} − {baseline}",
                        "margin": margin,
                        "estimate": asdict(d),
                        "verdict": verdict(d, margin),
                    }
                )
        out["models"][model] = entry
    out["lookup"] = lookup_counts(results, logs, library)
    out["provenance"] = with_build(provenance_summary(results), grid)
    out["funnel"] = {
        label: {direction: data["totals"] for direction, data in directions.items()}
        for label, directions in funnel(results, logs).items()
        if label in [library, *stored]
    }
    return out


def render(report: Mapping[str, Any]) -> str:
    """The report as Markdown."""
    steps = report["steps"]
    lines = ["# Trajectory library vs training alone and the step-aligned replay (issue 19)", ""]
    lines += ["Pre-registered in docs/study/LIBRARY-PREREGISTRATION.md; made by", ""]
    lines += [f"    python -m benchmarks.study.library_report --grid {report['grid']} ...", ""]
    lines += ["| model | row | seeds | average pass@1, % [95 % CI] |", "|---|---|---:|---:|"]
    for model, entry in report["models"].items():
        for label, d in entry["rows"].items():
            lines.append(f"| {model} | {label} | {d['seeds']} | {points(d)} |")
    lines += ["", "| model | id | contrast | Δ points [95 % CI] | verdict |"]
    lines += ["|---|---|---|---:|---|"]
    for model, entry in report["models"].items():
        for h in entry["hypotheses"]:
            rule = f" (margin {h['margin']:g})" if h["margin"] else ""
            lines.append(
                f"| {model} | {h['id']} | {h['contrast']}{rule} | "
                f"{points(h['estimate'], signed=True)} | {h['verdict']} |"
            )
    lines += ["", "Library lookups per step (mean over steps and seeds):", ""]
    lines += ["| receiver | " + " | ".join(LOOKUP) + " |", "|---|" + "---:|" * len(LOOKUP)]
    for agent, data in report["lookup"].items():
        values = " | ".join(f"{data['per_step'][name]:.2f}" for name in LOOKUP)
        lines.append(f"| {agent} | {values} |")
    lines += ["", "Transfers per step (mean over seeds of the run totals / steps):", ""]
    lines += ["| row | direction | gate candidates | prompts | responses | admitted | share |"]
    lines += ["|---|---|---:|---:|---:|---:|---:|"]
    for label, directions in report["funnel"].items():
        for direction, t in directions.items():
            share = "–" if t["admitted_share"] is None else f"{100 * t['admitted_share']:.0f} %"
            counts = " | ".join(
                f"{t[k] / steps:.2f}"
                for k in ("gate_candidates", "prompts", "transferred", "admitted")
            )
            lines.append(f"| {label} | {direction} | {counts} | {share} |")
    lines += ["", "Admitted share of the library's transferred responses by age (source steps):"]
    lines += ["", "| receiver | age | transferred | admitted | share |", "|---|---|---:|---:|---:|"]
    for agent, data in report["lookup"].items():
        for bucket, b in data["admitted_by_age_steps"].items():
            share = f"{100 * b['share']:.0f} %"
            lines.append(
                f"| {agent} | {bucket} | {b['transferred']:.0f} | {b['admitted']:.0f} | {share} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", required=True, help="the library grid file")
    parser.add_argument("--runs", required=True, help="the grid's output directory")
    parser.add_argument("--out", required=True, help="where report.md and report.json go")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    args = parser.parse_args(argv)
    report = analyse(args.grid, args.runs, args.resamples)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(render(report))
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
