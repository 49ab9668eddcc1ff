"""The report of the pre-registered study (issue 16; docs/study/PREREGISTRATION.md).

    python -m benchmarks.study.report --grid configs/grids/study.yaml \\
        --runs runs/compare/study --out docs/results/study

Reads the grid's finished cells (`compare.finished_results`: a partly run grid gives a
partial report, and a hypothesis whose labels have no finished cell is listed as "not
run") and writes to --out:

- README.md (`report_markdown.render`): the paper-style table (per model and label: mean
  average pass@1 over seeds with a 95 % interval from a bootstrap over seeds and problems,
  Δ vs GRPO n=8 with its paired interval, weak-skill pass@1, rescue share, rollouts and
  wall time per cell), the per-skill table, each hypothesis per model (estimate, interval,
  verdict), the smallest difference the setup resolves (the half-width of H1's interval),
  the exchange funnel totals, and the plots;
- results.json: every number of the README and the plotted curves;
- learning_curves.png / learning_curves_weak.png: periodic-evaluation pass@1 (average of
  the sets / of the model's weak skills), one panel per family against GRPO n=8, one row
  per model, mean ± std over seeds;
- funnel.png: the exchange funnel over training of the cells that exchange, per
  direction (gate candidates, kept prompts, transferred and admitted responses, clipped
  peer-token share, s), mean over seeds.

The hypotheses are the pre-registered ones (`hypotheses.HYPOTHESES`); their labels are the
study grid's. The statistics are `benchmarks.study.stats`, the curves and the funnel
`benchmarks.study.curves`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.compare.cells import grid_models, plan_cells
from benchmarks.compare.grid import GridError, GridSpec, load_grid
from benchmarks.compare.report import cell_records, compute_rows, provenance_summary, set_names
from benchmarks.compare.run import finished_results
from benchmarks.study.curves import funnel, learning_curves, metrics_logs
from benchmarks.study.hypotheses import (
    GRAFT,
    GRPO8,
    GRPO32,
    NO_BALANCE,
    NO_COMPAT,
    NO_FLOOR,
    STORED,
    hypothesis_results,
    skill_sets,
    study_table,
)
from benchmarks.study.plots import plot_funnel, plot_learning
from benchmarks.study.report_markdown import render

# one panel per family, each against GRPO n=8; every label keeps its style in every figure
FAMILIES = {
    "budgets": (GRPO8, GRPO32),
    "GRAFT controls": (GRPO8, GRAFT, NO_COMPAT, NO_FLOOR, NO_BALANCE),
    "stored peer": (GRPO8, GRAFT, STORED),
}
STYLES = {  # colour, line style, marker (`study.plots.Style`)
    GRPO8: ("black", "-", "o"),
    GRPO32: ("tab:blue", "--", "s"),
    GRAFT: ("tab:red", "-", "^"),
    NO_COMPAT: ("tab:orange", "--", "v"),
    NO_FLOOR: ("tab:green", "-.", "D"),
    NO_BALANCE: ("tab:purple", ":", "P"),
    STORED: ("tab:brown", (0, (5, 1, 1, 1, 1, 1)), "X"),
}


def analyse(
    grid: GridSpec, runs: str | Path, *, resamples: int = 10_000, seed: int = 0
) -> dict[str, Any]:
    """Every number of the report, from the grid's finished cells under `runs`."""
    runs = Path(runs)
    results = finished_results(grid, runs)
    logs = metrics_logs(runs, results)
    records = cell_records(results)
    labels = [entry.label for entry in grid.algorithms]
    bootstrap = {"resamples": resamples, "seed": seed}
    rows = study_table(records, labels, grid.baseline, **bootstrap)
    compute = compute_rows(records, labels)
    models = list(dict.fromkeys(row["model"] for row in rows))
    hypotheses = [
        entry
        for model in models
        for entry in hypothesis_results(records, model, rows, compute, **bootstrap)
    ]
    resolution = {
        e["model"]: (e["estimate"]["high"] - e["estimate"]["low"]) / 2 if e["estimate"] else None
        for e in hypotheses
        if e["hypothesis"] == "H1"
    }
    own = {model: skill_sets(records, model) for model in models}
    return {
        "grid": grid.name,
        "baseline": grid.baseline,
        "labels": labels,
        "sets": set_names(records),
        "skills": {m: {"weak": weak, "own": mine} for m, (weak, mine) in own.items()},
        "cells": {
            "finished": len(results),
            "planned": len(plan_cells(grid, runs)),
            "seconds": sum(r["timings"]["cell_seconds"] for r in results),
        },
        "bootstrap": bootstrap,
        "table": rows,
        "compute": compute,
        "hypotheses": hypotheses,
        "resolution": resolution,
        "learning_curves": {
            kind: [
                {"model": m, "label": label, **curve}
                for (m, label), curve in learning_curves(results, logs, records, weak).items()
            ]
            for kind, weak in (("average", False), ("weak_skills", True))
        },
        "funnel": funnel(results, logs),
        "provenance": with_build(provenance_summary(results), grid),
    }


def with_build(summary: dict[str, Any], grid: GridSpec) -> dict[str, Any]:
    """The report's provenance (`provenance_summary`) and what the numbers depend on beyond
    the code, under "build": this machine's CPU, kernel path and torch / oneDNN versions
    (the cells' and the build's, when they ran here) and each model's built weights
    (`model_identity`: cache key @ SHA-256; the cells' hashes hold it, so every finished cell
    trained these weights)."""
    return {**summary, "build": {"machine": summary["machine"], "weights": grid_models(grid)}}


def write_report(report: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """README.md, results.json and the PNGs there is data for."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "README.md", out_dir / "results.json"]
    paths[0].write_text(render(report))
    paths[1].write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    models = list(report["skills"])
    titles = {
        "average": ("learning_curves.png", "Periodic evaluation: pass@1, average of the sets"),
        "weak_skills": ("learning_curves_weak.png", "Periodic evaluation: pass@1, weak skills"),
    }
    for kind, (name, title) in titles.items():
        curves = {(c["model"], c["label"]): c for c in report["learning_curves"][kind]}
        if curves:
            paths.append(plot_learning(curves, models, out_dir / name, title, FAMILIES, STYLES))
    if report["funnel"]:
        paths.append(plot_funnel(report["funnel"], out_dir / "funnel.png", STYLES, GRAFT))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", default="configs/grids/study.yaml", help="the study's grid")
    parser.add_argument(
        "--runs", default=None, help="the grid's output directory (default: runs/compare/<name>)"
    )
    parser.add_argument("--out", default="docs/results/study", help="report directory")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    parser.add_argument("--bootstrap-seed", type=int, default=0)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a grid field as graft compare does, e.g. --set seeds=[0,1,2,3] to "
        "analyse exactly the seeds whose cells all finished (the stopping rule)",
    )
    args = parser.parse_args(argv)
    try:
        grid = load_grid(args.grid, args.overrides)
        runs = Path(args.runs) if args.runs else Path("runs") / "compare" / grid.name
        report = analyse(grid, runs, resamples=args.resamples, seed=args.bootstrap_seed)
    except GridError as error:
        print(f"benchmarks.study.report: {error}", file=sys.stderr)
        return 2
    paths = write_report(report, args.out)
    for entry in report["hypotheses"]:
        print(f"{entry['hypothesis']} {entry['model']}: {entry['verdict']}")
    print("written: " + ", ".join(str(path) for path in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
