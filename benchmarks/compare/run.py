"""`graft compare`: every cell of a grid through the one training loop, then the harness.

For each cell (see `benchmarks.compare.cells`): `algorithms.training.loop.Trainer(config).train()`
(which resumes an interrupted run from its own checkpoints), then `graft_env.eval.evaluate`
on each updated model's best or final checkpoint. The cell's ``result.json`` records the
config and its hash, the seed, package versions and git commit (`report.run_provenance`),
timings, every evaluation result (with per-problem success counts), the learning curves,
and each training step's per-prompt success counts k, from which the report computes the
complementarity curve and the rollouts generated up to the evaluated checkpoint.

Cells are claimed, not assigned: a process takes the first cell in plan order that is
unfinished, not held by a live process, and whose sources (a stored peer's run, a library's
runs) are finished, by writing a lock file (its pid and host) into the cell's directory. So
the grid's `workers` processes, and any other `graft compare` on the same --out, share the
cells without running one twice; the lock of a process that died is taken over, so a killed
run resumes instead of waiting. Here: the scheduler (`_work`) and `run_grid`; one cell's run
is `cell_run.run_cell`, the worker processes `workers`.

    grid = load_grid("configs/compare_tiny.yaml")
    results = run_grid(grid, "runs/compare/tiny")
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks.compare.cell_run import CellFailed, eval_problems, one_line, run_cell
from benchmarks.compare.cells import Cell, changed_cells, plan_cells, read_result, remove_cell
from benchmarks.compare.claims import claim_next, release
from benchmarks.compare.grid import GridError, GridSpec
from benchmarks.compare.workers import LOG_FORMAT, run_workers
from graft_env.threads import resolve_threads, torch_threads

__all__ = [
    "LOG_FORMAT",
    "CellFailed",
    "eval_problems",
    "finished_results",
    "run_cell",
    "run_grid",
]

POLL_SECONDS = 2.0  # between looks at cells that others hold or that wait for a source


def _headline(result: Mapping[str, Any]) -> str:
    parts = []
    for agent, model in result["models"].items():
        average = model["eval"]["average"]["pass@1"]
        parts.append(f"{agent} pass@1 {100 * average:.1f}%")
    return ", ".join(parts)


def finished_results(grid: GridSpec, out_dir: str | Path) -> list[dict[str, Any]]:
    """The results of the grid's finished cells (for reports on a partly run grid)."""
    results = [read_result(cell) for cell in plan_cells(grid, out_dir)]
    found = [result for result in results if result is not None]
    if not found:
        raise GridError(f"no finished cells of grid {grid.name!r} under {out_dir}")
    return found


def _work(
    grid: GridSpec,
    cells: Sequence[Cell],
    out_dir: Path,
    console: Console,
    stop: Callable[[], bool],
) -> dict[str, dict[str, Any]]:
    """Claim and run cells until none is left or `stop()`: the one scheduler, run by this
    process (one worker) or by each worker process. Returns the results it produced."""
    final_sets = None
    ran: dict[str, dict[str, Any]] = {}
    waited: tuple[str, ...] = ()
    with torch_threads(resolve_threads(grid.threads)):
        while not stop():
            claim = claim_next(cells, out_dir, console.print, ran)
            cell = claim.cell
            if cell is None:
                if not claim.waiting:
                    break
                if claim.waiting != waited:
                    console.print(
                        f"waiting for {len(claim.waiting)} cell(s): " + ", ".join(claim.waiting)
                    )
                    waited = claim.waiting
                time.sleep(POLL_SECONDS)
                continue
            where = f"[{cells.index(cell) + 1}/{len(cells)}] {cell.cell_id}"
            try:
                if final_sets is None:
                    final_sets = eval_problems(grid, grid.eval.limit)
                console.rule(f"{where}: {'training' if cell.config else 'evaluating'}")
                result = run_cell(cell, grid, final_sets)
            except Exception as error:
                # a cell may fail after an hour: the whole traceback for the log, then one line
                traceback.print_exc()
                raise CellFailed(f"cell {cell.cell_id} failed: {one_line(error)}") from error
            finally:
                release(cell)
            ran[cell.cell_id] = result
            console.print(
                f"{where}: done in {result['timings']['cell_seconds']:.0f} s ({_headline(result)})"
            )
    return ran


def run_grid(
    grid: GridSpec,
    out_dir: str | Path,
    *,
    redo_changed: bool = False,
    console: Console | None = None,
) -> list[dict[str, Any]]:
    """Run every unfinished cell of `grid` under `out_dir`, `grid.workers` at a time; returns
    every cell's result in plan order, whichever process ran it.

    Cells whose directory holds a run of another config stop the grid with a GridError
    listing them, unless `redo_changed` (then they are deleted and run again).
    """
    console = console or Console(stderr=True)
    out_dir = Path(out_dir)
    # built first: a cell's hash holds its models' weights digest (model_identity)
    cells = plan_cells(grid, out_dir, build=True)
    stale = changed_cells(cells)
    if stale and not redo_changed:
        names = ", ".join(cell.cell_id for cell in stale)
        raise GridError(f"cells run with another config: {names}; use --redo-changed")
    for cell in stale:
        remove_cell(cell)
    found = [read_result(cell) for cell in cells]
    for number, (cell, result) in enumerate(zip(cells, found, strict=True), 1):
        if result is not None:
            where = f"[{number}/{len(cells)}] {cell.cell_id}"
            console.print(f"{where}: finished earlier, skipped ({_headline(result)})")
    workers = min(grid.workers, found.count(None))  # a process per cell left at most
    ran = {}
    if workers <= 1:
        ran = _work(grid, cells, out_dir, console, lambda: False)
    else:
        run_workers(_work, grid, cells, out_dir, workers)
    results = [ran.get(cell.cell_id) or read_result(cell) for cell in cells]
    missing = [cell.cell_id for cell, result in zip(cells, results, strict=True) if result is None]
    if missing:
        raise GridError(f"cells not finished: {', '.join(missing)}")
    return results
