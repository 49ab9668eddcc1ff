"""The gap study's report (issue 29; docs/study/GAP-PREREGISTRATION.md, sections 2-6).

    python -m benchmarks.study.gap_report --out runs/compare/gap \\
        [--grids configs/grids/gap.yaml configs/grids/gap-n32.yaml configs/grids/gap-controls.yaml]

Plans the grids' cells under --out (`plan_cells`): a cell is read only if its result.json
holds the hash planned now, a cell that holds another is listed as stale and never read, a
cell without a result is missing. Writes <out>/gap_report/results.json (every number,
every per-seed value), report.md and, where there is data, dose_response.png and
learning_curves.png.

This module is the command line and composes the parts in `benchmarks/study/gap/`: the
design and its contrasts, the cells read into a `Study`, the contrasts' statistics and
verdicts, H2's slope, the descriptive tables, the paper comparison, report.md and figures.

- A model's score: pass@1 on its own gap family (the evaluation set of the skill its gap
  family belongs to: gap-*-a is kept from borrow subtractions, `procedural/subtraction`;
  gap-*-b from carry additions, `procedural/addition`; read from `GapTargets.families`), in
  points; the other family is its strength, reported as a forgetting guard. Per model and
  pooled (the mean of a and b).
- Each contrast of the pre-registration's section 4 (`contrast_specs`; H2 by `slope_entry`)
  is a weighted sum of (label, model) scores over exactly the seeds whose cells of that
  contrast all finished (the others are listed with the cells they lack), with the
  two-level paired bootstrap of `stats.paired_contrast` (seeds and problems resampled), the
  t-interval over the per-seed values and the MDE at 80 % power (`stats.t_interval`,
  `stats.detectable_effect`), and the verdict rule of section 5 (`verdicts`). A contrast
  whose cells did not run is listed as "not run".
- H2's interval resamples within each dose, as section 5 registers it (`slope_bootstrap`):
  each dose's part of the slope has its own independent bootstrap (seeds and problems
  resampled, stream seeded (bootstrap seed, dose index)), and the slope's replicates are
  the sum of the doses'.
- Contrasts across models (pooled, H2, H3) go through `paired_contrast` on one "gap" record
  per cell and model (`gap_record`): its own gap set as measured, the other gap set zeroed,
  so that the set weights (1 on each gap set) take each model's score on its own gap only.
- The dose axis is measured, not nominal: each model's pass@1 on its gap in its base cell.
- Provenance per pair: the build's cache key and weights SHA-256 (`model_identity`, which
  every finished cell's hash holds, beside the build's build.json), this machine's CPU
  flags and torch / oneDNN versions (`kernel_provenance`, through `provenance_summary`), the
  cells' package versions and kernel paths.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.compare.grid import GridError, GridSpec, load_grid
from benchmarks.compare.report import provenance_summary
from benchmarks.study.gap.cells import gap_models, make_study, read_cells
from benchmarks.study.gap.contrasts import contrast_entries
from benchmarks.study.gap.descriptive import (
    dose_table,
    first_steps,
    funnel_totals,
    gap_curves,
    pair_provenance,
    score_rows,
)
from benchmarks.study.gap.design import ARMS, contrast_specs
from benchmarks.study.gap.figures import plot_dose_response
from benchmarks.study.gap.markdown import render
from benchmarks.study.gap.paper import against_paper
from benchmarks.study.gap.slope import slope_entry
from benchmarks.study.plots import plot_learning
from benchmarks.study.report import GRPO8, GRPO32, STYLES

GRIDS = (
    "configs/grids/gap.yaml",
    "configs/grids/gap-n32.yaml",
    "configs/grids/gap-controls.yaml",
)
REPORT_DIR = "gap_report"


def analyse(
    grids: Sequence[GridSpec], out: str | Path, *, resamples: int = 10_000, seed: int = 0
) -> dict[str, Any]:
    """Every number of the report, from the grids' finished cells under `out`."""
    out = Path(out)
    gaps = gap_models(grids)
    cells = read_cells(grids, out)
    bootstrap = {"resamples": resamples, "seed": seed}
    study = make_study(cells, gaps, out, **bootstrap)
    entries = contrast_entries(study, contrast_specs())
    h2 = [slope_entry(study, arm) for arm in ARMS]
    scores = score_rows(study)
    curves = gap_curves(study)
    return {
        "grids": [grid.name for grid in grids],
        "out": str(out),
        "bootstrap": bootstrap,
        "cells": {
            "per_grid": cells.grids,
            "finished": len(cells.results),
            "planned": len(cells.planned),
            "stale": cells.stale,
            "missing": len(cells.missing),
        },
        "models": {name: dataclasses.asdict(gap) for name, gap in gaps.items()},
        "doses": dose_table(study),
        "scores": scores,
        "contrasts": entries + h2,
        "against_paper": against_paper(entries + h2, scores),
        "funnel": funnel_totals(study),
        "first_steps": first_steps(study),
        "learning_curves": [{"model": m, "label": label, **c} for (m, label), c in curves.items()],
        "provenance": {
            **provenance_summary(cells.results),
            "pairs": pair_provenance(grids, gaps),
        },
    }


def write_report(report: Mapping[str, Any], directory: Path) -> list[Path]:
    """results.json, report.md and the plots there is data for."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "results.json", directory / "report.md"]
    paths[0].write_text(json.dumps(report, indent=2, allow_nan=False, default=float) + "\n")
    paths[1].write_text(render(report))
    plotted = plot_dose_response(report, directory / "dose_response.png")
    if plotted:
        paths.append(plotted)
    curves = {(c["model"], c["label"]): c for c in report["learning_curves"] if c["step"]}
    if curves:
        models = list(dict.fromkeys(m for m, _ in curves))
        families = {"exchange arms": (GRPO8, *ARMS), "budgets": (GRPO8, GRPO32)}
        title = "Periodic evaluation: pass@1 on the model's gap family"
        paths.append(
            plot_learning(
                curves, models, directory / "learning_curves.png", title, families, STYLES
            )
        )
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/compare/gap", help="the grids' output directory")
    parser.add_argument("--grids", nargs="+", default=list(GRIDS), help="the gap study's grids")
    parser.add_argument("--report-dir", default=None, help=f"default: <out>/{REPORT_DIR}")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    parser.add_argument("--bootstrap-seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        grids = [load_grid(path) for path in args.grids]
        report = analyse(grids, args.out, resamples=args.resamples, seed=args.bootstrap_seed)
    except GridError as error:
        print(f"benchmarks.study.gap_report: {error}", file=sys.stderr)
        return 2
    directory = Path(args.report_dir) if args.report_dir else Path(args.out) / REPORT_DIR
    paths = write_report(report, directory)
    for entry in report["contrasts"]:
        if entry["hypothesis"] != "D":
            print(f"{entry['contrast']} {entry['scope']}: {entry['verdict']}")
    print("written: " + ", ".join(str(path) for path in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
