"""The gap study's peer-control report (issue 39; docs/study/GAP-CONTROLS-PREREGISTRATION.md).

    python -m benchmarks.study.controls_report --out runs/gap-peer-controls \\
        --report-dir docs/results/gap-peer-controls/report

Reads each build's cells under <out>/<build> (build0: configs/grids/gap-peer-controls.yaml,
seeds 10-21; build1: gap-peer-controls-b1.yaml, seeds 22-33), planned by the grid's own
hashes (a cell of another config is stale and not read), and writes results.json (every
number, every per-seed value with its build) and report.md:

- the pre-registration check: the last commit touching the design files against every
  cell's recorded start (`controls.timing`);
- the doses, two ways: the build report's test split (pre-registered) and the base cell's
  pass@1 at the evaluation temperature; the builds' cache keys and weights SHA-256;
- C1 GRAFT − GRPO n=8, C2 GRAFT − twin peer, C3 GRAFT − shuffled-reward peer (and S1, S2)
  per seed, pooled over models, over both builds: mean, t-interval (primary), the gap
  study's two-level paired bootstrap beside it, sd, MDE, the t-test's p, Holm over C1-C3 and
  the verdicts; the same per model and per build, and build 0 − build 1 (Welch);
- the groups each arm moved per step, the twin's matched share, and S4 (per moved group).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.study.controls.exchange import moved_groups, per_moved_group
from benchmarks.study.controls.markdown import report_main, report_markdown
from benchmarks.study.controls.numbers import all_contrasts, doses, merged, read_builds
from benchmarks.study.controls.timing import cell_starts, design_commit, registration_check

REPO = Path(__file__).resolve().parents[2]


def analyse(out: Path, repo: Path = REPO) -> dict[str, Any]:
    """Every number of the report, from the cells under `out`."""
    studies = read_builds(out, root=repo)
    pooled = merged([study for _, _, _, study in studies])
    counts = {
        key: sum(len(getattr(cells, key)) for _, _, cells, _ in studies)
        for key in ("results", "stale", "missing")
    }
    trained = pooled.results
    moved = moved_groups(pooled)
    return {
        "cells": {
            "planned": sum(len(cells.planned) for _, _, cells, _ in studies),
            "finished": counts["results"],
            "stale": counts["stale"],
            "missing": counts["missing"],
            "stale_cells": [c for _, _, cells, _ in studies for c in cells.stale],
        },
        "registration": registration_check(design_commit(repo), cell_starts(trained)),
        "doses": doses(studies),
        "contrasts": all_contrasts(studies, pooled),
        "moved": moved,
        "s4": per_moved_group(pooled, moved),
        "wall_seconds": {r["cell"]: r.get("timings", {}).get("cell_seconds") for r in trained},
    }


def main(argv: Sequence[str] | None = None) -> int:
    description = __doc__.split("\n\n")[0]
    return report_main(argv, description, "runs/gap-peer-controls", analyse, report_markdown)


if __name__ == "__main__":
    sys.exit(main())
