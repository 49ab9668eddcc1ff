"""`graft compare`: run a comparison grid (algorithms x model pairs x seeds) and report it.

Writes, under --out: ``cells/.../`` (each cell's run directory, evaluation reports and
``result.json``), ``table.md`` / ``table.csv`` / ``table.json`` (the paper-style table and
the compute table), ``compute.csv``, ``curves.json`` and the PNG plots. Run it again to
resume: finished cells are skipped, an interrupted one resumes from its checkpoints.
With --workers N, N cells run at once, each in its own process; commands started by hand on
the same --out share its cells too (each cell is claimed by one process at a time).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from benchmarks.config_files import find_config, packaged

DEFAULT_GRID = packaged() / "grids" / "compare_tiny.yaml"


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compare",
        help="train and evaluate a grid of algorithms x model pairs x seeds",
        description="Run every cell of a comparison grid through the training loop, evaluate "
        "each updated model, and write the paper-style table, the compute table and the "
        "learning and complementarity curves. Finished cells are skipped on a rerun.",
    )
    parser.add_argument(
        "--config",
        type=find_config,
        default=str(DEFAULT_GRID),
        help="grid YAML: a path, or a shipped grid's name (configs/grids/X.yaml) "
        f"(default: {DEFAULT_GRID.name})",
    )
    parser.add_argument(
        "--out", default=None, help="output directory (default: runs/compare/<grid name>)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a grid field, e.g. --set seeds=[0] --set train.steps=4",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="run N cells at once, each in a process with the grid's threads (as --set "
        "workers=N; default: the grid's workers, 1)",
    )
    parser.add_argument(
        "--redo-changed",
        action="store_true",
        help="delete and rerun cells whose directory holds a run of another config",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="only rebuild the reports from finished cells"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from benchmarks.compare.grid import load_grid
    from benchmarks.compare.plots import write_plots
    from benchmarks.compare.report import cell_records, write_reports
    from benchmarks.compare.run import LOG_FORMAT, finished_results, run_grid

    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    workers = [] if args.workers is None else [f"workers={args.workers}"]
    grid = load_grid(args.config, [*args.overrides, *workers])
    out_dir = Path(args.out) if args.out else Path("runs") / "compare" / grid.name
    if args.report_only:
        results = finished_results(grid, out_dir)
    else:
        results = run_grid(grid, out_dir, redo_changed=args.redo_changed)
    labels = [entry.label for entry in grid.algorithms]
    paths = write_reports(results, out_dir, grid.baseline, labels)
    banded = {grid.baseline, *(entry.label for entry in grid.algorithms if entry.name == "graft")}
    paths += write_plots(cell_records(results), out_dir, labels, banded)
    print(paths[0].read_text())
    print("written: " + ", ".join(str(path) for path in paths))
    return 0
