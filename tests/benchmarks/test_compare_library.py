"""graft-library cells of a comparison grid: their library is built from the partner's runs at
other seeds (other prompt orders), they wait for those runs, and they train on it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from cell_files import finish, write_lock
from run_configs import SMALLEST_GRID as SMALLEST
from run_configs import TWO_SEED_GRID as PLANNED

from algorithms.library.format import load_library
from benchmarks.cli import main
from benchmarks.compare.cells import RESULT_FILE, plan_cells
from benchmarks.compare.claims import claim_next, release
from benchmarks.compare.grid import GridError, grid_from_dict
from benchmarks.study import library_report
from graft_env.policies.cache import weights_sha256
from graft_env.policies.zoo import model_path

LIBRARY = {"name": "graft-library", "label": "library", "library_from": "GRPO n=4"}


def with_library(data: dict, entry: dict = LIBRARY) -> dict:
    """`data` with the library entry added, at seeds 0, 1, 2."""
    data = copy.deepcopy(data)
    data["algorithms"] = [*data["algorithms"], entry]
    data["seeds"] = [0, 1, 2]
    return data


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {**LIBRARY, "library_runs": 3},
            r"library_runs: 3 runs .* at least 4 seeds",
        ),
        ({**LIBRARY, "library_from": "lib"}, r"algorithms\.3\.library_from: 'lib' is not one of"),
        ({**LIBRARY, "library_from": "stored"}, r"algorithms\.3\.library_from: 'stored' is not"),
        ({**LIBRARY, "name": "grpo"}, r"algorithms\.3\.library_from: 'grpo' does not replay"),
        ({**LIBRARY, "stored_peer_from": "GRPO n=4"}, r"algorithms\.3: set stored_peer_from or"),
        ({**LIBRARY, "library_runs": 0}, r"algorithms\.3\.library_runs: 0 must be >= 1"),
    ],
)
def test_invalid_library_entries_name_the_field(entry, message):
    with pytest.raises(GridError, match=message):
        grid_from_dict(with_library(PLANNED, entry))


def test_library_cells_read_the_partners_runs_at_the_next_seeds_and_come_last(tmp_path):
    cells = plan_cells(grid_from_dict(with_library(PLANNED)), tmp_path)
    ids = [cell.cell_id for cell in cells]
    library = [cell for cell in cells if cell.library_cells]
    assert [cell.cell_id for cell in library] == [
        f"library/{agent}/seed{seed}" for seed in (0, 1, 2) for agent in ("tiny-a", "tiny-b")
    ]
    assert ids[-len(library) :] == [cell.cell_id for cell in library]
    by_id = {cell.cell_id: cell for cell in cells}
    receiver = by_id["library/tiny-a/seed2"]
    assert receiver.library_cells == ("grpo-n-4/tiny-b/seed0", "grpo-n-4/tiny-b/seed1")
    assert receiver.library_runs == tuple(
        by_id[source].directory / "run" for source in receiver.library_cells
    )
    assert receiver.partner == "tiny-b" and receiver.sources == receiver.library_cells
    config = receiver.config
    assert config.algorithm == "graft-library" and config.stored_peer is None
    assert Path(config.library.path) == receiver.directory / "library"
    assert [agent.name for agent in config.agents] == ["tiny-a"] and config.seed == 2


def test_a_library_cells_hash_follows_its_sources_not_the_output_folder(tmp_path):
    def hashes(data, out):
        return {c.cell_id: c.config_hash for c in plan_cells(grid_from_dict(data), out)}

    before = hashes(with_library(PLANNED), tmp_path / "one")
    assert before == hashes(with_library(PLANNED), tmp_path / "two")
    data = with_library(PLANNED)
    data["pairs"][0]["options"] = {"tiny-b": {"lr": 1e-3}}  # every tiny-b run changes
    after = hashes(data, tmp_path / "one")
    # tiny-a's library is made of tiny-b's runs: it changes, though tiny-a's own config did not
    for seed in (0, 1, 2):
        assert before[f"library/tiny-a/seed{seed}"] != after[f"library/tiny-a/seed{seed}"]
        assert before[f"grpo-n-4/tiny-a/seed{seed}"] == after[f"grpo-n-4/tiny-a/seed{seed}"]


def test_a_library_cell_waits_for_every_run_its_library_is_built_from(tmp_path, live_pid):
    cells = plan_cells(grid_from_dict(with_library(PLANNED)), tmp_path)
    by_id = {cell.cell_id: cell for cell in cells}
    receiver = by_id["library/tiny-a/seed0"]
    running = by_id[receiver.library_cells[1]]  # its second source, held by a live process
    write_lock(running, live_pid[0])
    for cell in cells:
        if not cell.library_cells and cell is not running:
            finish(cell)
    claimed = []
    while (claim := claim_next(cells, tmp_path, print)).cell is not None:
        claimed.append(claim.cell.cell_id)
        finish(claim.cell)
        release(claim.cell)
    # the cells whose library does not need the running source ran; those that do wait
    needs = {cell.cell_id for cell in cells if running.cell_id in cell.library_cells}
    assert receiver.cell_id in needs and len(needs) == 2
    assert set(claimed) == {cell.cell_id for cell in cells if cell.library_cells} - needs
    assert f"{receiver.cell_id} (after {running.cell_id})" in claim.waiting
    finish(running)
    assert claim_next(cells, tmp_path, print).cell == receiver


def metrics(cell: Path) -> list[dict]:
    """The rows of a cell's metrics.jsonl."""
    return [json.loads(line) for line in (cell / "run" / "metrics.jsonl").read_text().splitlines()]


def test_a_library_cell_trains_on_the_partners_groups_of_its_source_runs(tmp_path, capfd):
    data = copy.deepcopy(SMALLEST)
    data["base"]["steps"] = 2
    data["algorithms"] = [
        {"name": "grpo", "label": "GRPO n=2"},
        {"name": "graft-stored", "label": "stored", "stored_peer_from": "GRPO n=2"},
        {"name": "graft-library", "label": "lib", "library_from": "GRPO n=2", "library_runs": 1},
    ]
    data["seeds"] = [0, 1]
    data["train"] = {"env": {"batch_size": 3}}
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert main(["compare", "--config", str(grid), "--out", str(out)]) == 0
    cell = out / "cells" / "lib" / "tiny-a" / "seed0"
    library = load_library(cell / "library")
    source = out / "cells" / "grpo-n-2" / "tiny-b" / "seed1" / "run"
    # every group tiny-b stored at seed 1 (2 steps x 3 prompts), and nothing else
    assert len(library.groups) == 6
    assert {(g.model_id, g.source) for g in library.groups} == {("tiny-b", str(source.resolve()))}
    rows = metrics(cell)
    assert [row["step"] for row in rows] == [0, 1]
    assert all("library/found_prompts" in row for row in rows)
    result = json.loads((cell / RESULT_FILE).read_text())
    assert result["library_cells"] == ["grpo-n-2/tiny-b/seed1"]
    capfd.readouterr()
    assert main(["compare", "--config", str(grid), "--out", str(out)]) == 0
    assert capfd.readouterr().err.count("finished earlier, skipped") == 12  # 4 per row

    # the pre-registered report (benchmarks.study.library_report) on this grid
    report = tmp_path / "report"
    argv = ["--grid", str(grid), "--runs", str(out), "--out", str(report), "--resamples", "50"]
    assert library_report.main(argv) == 0
    found = json.loads((report / "report.json").read_text())
    hypotheses = [(h["id"], h["contrast"]) for h in found["models"]["tiny-a"]["hypotheses"]]
    assert hypotheses == [("L1", "lib − GRPO n=2"), ("L2", "lib − stored")]
    lookups = found["lookup"]["tiny-a"]
    assert lookups["seeds"] == 2 and set(lookups["per_step"]) == set(library_report.LOOKUP)
    cells = [out / "cells" / "lib" / "tiny-a" / f"seed{seed}" for seed in (0, 1)]
    counts = [row["library/all_fail_prompts"] for cell in cells for row in metrics(cell)]
    assert lookups["per_step"]["all_fail_prompts"] == np.mean(counts)  # 2 steps per seed
    assert "| tiny-b | lib | 2 |" in (report / "report.md").read_text()
    build = found["provenance"]["build"]  # the weights the cells trained, the machine's kernels
    assert build["weights"]["tiny-a"].endswith(f"/tiny-a@{weights_sha256(model_path('tiny-a'))}")
    assert build["machine"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert build["machine"]["onednn"] and build["machine"]["torch"] == torch.__version__


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["algorithms"][3].update(options={"n": 8}),
            r"algorithms\.3: n=8, but its source 'GRPO n=4' stores groups of n=4",
        ),
        (
            lambda d: d["algorithms"][2].update(options={"n": 6}),
            r"algorithms\.2: n=6, but its source 'GRPO n=4' stores groups of n=4",
        ),
        (
            lambda d: d["algorithms"][0].update(library_runs=2),
            r"algorithms\.0\.library_runs: set only with library_from",
        ),
        (
            lambda d: d.setdefault("train", {}).update(
                library={"path": "x", "choose": "highest_k"}
            ),
            r"base/train: library is set by the grid for each cell",
        ),
    ],
)
def test_a_source_of_another_group_size_or_a_library_in_the_run_config_is_refused(change, message):
    data = with_library(PLANNED)
    change(data)
    with pytest.raises(GridError, match=message):
        grid_from_dict(data)
