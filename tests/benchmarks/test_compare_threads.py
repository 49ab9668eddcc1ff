"""`graft compare` and threads: the grid runs its cells with the grid's `threads` (default as
for `graft train`: $OMP_NUM_THREADS, else 1), and a cell's hash does not depend on them."""

from __future__ import annotations

import copy

import pytest
import torch
from run_configs import PLANNED_GRID

import benchmarks.compare.run
from benchmarks.compare.cells import plan_cells
from benchmarks.compare.grid import grid_from_dict

GRID = PLANNED_GRID


def test_a_cells_hash_does_not_depend_on_its_threads(tmp_path):
    def hashes(data):
        return {
            cell.cell_id: cell.config_hash for cell in plan_cells(grid_from_dict(data), tmp_path)
        }

    threaded = copy.deepcopy(GRID)
    threaded["train"] = {"threads": 2}
    assert hashes(threaded) == hashes(GRID)


@pytest.mark.parametrize(("threads", "expected"), [(None, 1), (3, 3)])
def test_the_grid_runs_its_cells_with_its_threads(threads, expected, tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen = []

    def run_cell(cell, grid, final_sets):
        seen.append(torch.get_num_threads())
        return {"models": {}, "timings": {"cell_seconds": 0.0}}

    monkeypatch.setattr(benchmarks.compare.run, "run_cell", run_cell)
    monkeypatch.setattr(benchmarks.compare.run, "eval_problems", lambda grid, limit: {})
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        benchmarks.compare.run.run_grid(grid_from_dict({**GRID, "threads": threads}), tmp_path)
        assert torch.get_num_threads() == 2  # the caller's count comes back
    finally:
        torch.set_num_threads(before)
    assert seen == [expected] * 3  # GRPO on each model, GRAFT on the pair
