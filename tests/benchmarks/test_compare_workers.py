"""`graft compare --workers N`: cells claimed through lock files in their directories (a
dead process's lock is taken over, a live one's cell is left to it, a stored-peer cell waits
for the cell whose store it replays), and a grid run in two processes gives the results of
one, cell by cell."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cell_files import HOST, finish, write_lock
from run_configs import PLANNED_GRID, SMALLEST_GRID

from benchmarks.cli import main
from benchmarks.compare.cells import RESULT_FILE, STARTED_FILE, plan_cells
from benchmarks.compare.claims import LOCK_FILE, claim_next, release
from benchmarks.compare.grid import grid_from_dict

PLANNED = PLANNED_GRID
GRID = SMALLEST_GRID
STORED = {
    **PLANNED,
    "algorithms": [
        {"name": "grpo", "label": "GRPO"},
        {"name": "graft-stored", "label": "stored", "stored_peer_from": "GRPO"},
    ],
}


def test_a_live_processs_cell_is_passed_over_and_a_dead_ones_is_taken_over(tmp_path, live_pid):
    cells = plan_cells(grid_from_dict(PLANNED), tmp_path)
    pid, kill = live_pid
    said = []
    write_lock(cells[0], pid)
    write_lock(cells[2], pid, "another-host")  # a pid there cannot be checked: left alone
    claim = claim_next(cells, tmp_path, said.append)
    assert claim.cell == cells[1] and said == []
    assert json.loads((cells[1].directory / LOCK_FILE).read_text()) == {
        "pid": os.getpid(),
        "host": HOST,
    }

    kill()
    claim = claim_next(cells, tmp_path, said.append)
    assert claim.cell == cells[0]  # first in plan order again, its holder gone
    assert len(said) == 1 and "stale" in said[0] and str(pid) in said[0], said
    assert json.loads((cells[0].directory / LOCK_FILE).read_text())["pid"] == os.getpid()

    for cell in cells[:2]:
        release(cell)
        assert not (cell.directory / LOCK_FILE).exists()
        finish(cell)
    claim = claim_next(cells, tmp_path, said.append)
    assert claim.cell is None and claim.waiting == (
        f"{cells[2].cell_id} (pid {pid} on another-host)",
    )


def test_a_stored_peer_cell_waits_for_the_cell_whose_store_it_replays(tmp_path, live_pid):
    cells = plan_cells(grid_from_dict(STORED), tmp_path)
    by_id = {cell.cell_id: cell for cell in cells}
    sources = [cell for cell in cells if cell.stored_peer_cell is None]
    stored = [cell for cell in cells if cell.stored_peer_cell is not None]
    assert len(sources) == len(stored) == 2
    pid, _ = live_pid
    for cell in sources:
        write_lock(cell, pid)
    claim = claim_next(cells, tmp_path, print)
    assert claim.cell is None and len(claim.waiting) == 4

    # the source of the second stored cell finishes: that one can start, the first still waits
    finish(by_id[stored[1].stored_peer_cell])
    claim = claim_next(cells, tmp_path, print)
    assert claim.cell == stored[1]
    finish(stored[1])
    release(stored[1])
    claim = claim_next(cells, tmp_path, print)
    assert claim.cell is None and f"{stored[0].cell_id} (after " in " ".join(claim.waiting)

    for cell in cells:
        finish(cell)
        release(cell)
    assert claim_next(cells, tmp_path, print) == type(claim)(None, ())


def test_workers_are_not_part_of_a_cells_hash(tmp_path):
    def hashes(data):
        return {c.cell_id: c.config_hash for c in plan_cells(grid_from_dict(data), tmp_path)}

    assert grid_from_dict({**PLANNED, "workers": 3}).workers == 3
    assert hashes({**PLANNED, "workers": 3}) == hashes(PLANNED)


def outcome(out: Path) -> dict[str, dict]:
    """Per cell and agent: what training and evaluation found (not timings or paths)."""
    found = {}
    for path in sorted((out / "cells").rglob(RESULT_FILE)):
        result = json.loads(path.read_text())
        found[result["cell"]] = {
            agent: {
                "successes": {s: b["successes"] for s, b in model["eval"]["benchmarks"].items()},
                "train_counts": model["train_counts"],
                "reward_mean": model["curves"]["reward_mean"],
            }
            for agent, model in result["models"].items()
        }
    return found


def test_two_workers_give_the_results_of_one(tmp_path, capfd):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["compare", "--config", str(grid), "--out", str(one)]) == 0
    capfd.readouterr()
    assert main(["compare", "--config", str(grid), "--out", str(two), "--workers", "2"]) == 0
    printed = capfd.readouterr()
    assert "| tiny-a (tiny-b) | GRAFT | 1 |" in printed.out  # the reports, once, by the parent
    for worker in ("[w1]", "[w2]"):
        assert any(
            line.startswith(worker) and "done in" in line for line in printed.err.splitlines()
        )
    assert len(outcome(two)) == 3 and outcome(two) == outcome(one)
    assert not list(two.rglob(LOCK_FILE))

    assert main(["compare", "--config", str(grid), "--out", str(two), "--workers", "2"]) == 0
    assert capfd.readouterr().err.count("finished earlier, skipped") == 3


def test_a_failing_cell_in_a_worker_is_one_line_naming_it_and_leaves_no_lock(tmp_path, capfd):
    data = copy.deepcopy(GRID)
    data["algorithms"] = [{"name": "grpo", "label": "GRPO"}]
    data["pairs"] = [[str(tmp_path / "missing-a"), str(tmp_path / "missing-b")]]
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert main(["compare", "--config", str(grid), "--out", str(out), "--workers", "2"]) == 2
    last = capfd.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("graft compare: error: cell grpo/missing-"), last
    assert not list(out.rglob(LOCK_FILE)) and not list(out.rglob(RESULT_FILE))


def _children(parent: int) -> set[int]:
    """The pids whose parent is `parent` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[1]) == parent:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_workers_do_not_outlive_a_killed_parent(sig, tmp_path):
    """Killing `graft compare` (a scheduler's SIGTERM, or SIGKILL) must not leave its
    workers training cells on their own: a later run would have them beside its own."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    command = [sys.executable, "-m", "benchmarks.cli", "compare", "--config", str(grid)]
    command += ["--out", str(tmp_path / "out"), "--workers", "2"]
    parent = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(workers := _children(parent.pid)) < 3:  # 2 workers + the resource tracker
            assert parent.poll() is None and time.monotonic() < deadline, "no workers started"
            time.sleep(0.2)
        # a worker is past its imports and set-up once it has started a cell (its cell.json),
        # however loaded the machine: wait for that, not for a fixed time (120 s: a hang guard)
        started = tmp_path / "out"
        while not any(started.rglob(STARTED_FILE)):
            assert parent.poll() is None and time.monotonic() < deadline, "no cell started"
            time.sleep(0.2)
        parent.send_signal(sig)
        parent.wait(timeout=60)
        deadline = time.monotonic() + 180  # a worker may still be importing torch (loaded CPU)
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()
