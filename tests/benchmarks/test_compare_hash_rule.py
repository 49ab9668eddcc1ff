"""A cell's hash covers what the cell uses: a new option of an unrelated strategy leaves every
shipped grid's cells valid; the committed cells hash as planned now; committed results name no
machine's directories."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import algorithms.config as config_module
import algorithms.presets  # noqa: F401  (the entries, registered before a test copies them)
import algorithms.registry as registry_module
from algorithms.exchange import register_strategy
from algorithms.exchange.base import options_read
from algorithms.exchange.graft import GraftExchange
from algorithms.exchange.none import NoExchange
from benchmarks.compare import rehash
from benchmarks.compare.cells import out_of, plan_cells, portable_result
from benchmarks.compare.grid import load_grid
from graft_env.schema import Fraction, OptionError

REPO = Path(__file__).resolve().parents[2]
GRIDS = sorted((REPO / "configs" / "grids").glob("*.yaml"))
GAP = REPO / "docs" / "results" / "gap"
GAP_GRIDS = [
    REPO / "configs" / "grids" / f"{name}.yaml" for name in ("gap", "gap-n32", "gap-controls")
]


@dataclass(frozen=True)
class LateOptions:
    late_share: Fraction = field(default=0.5, metadata={"help": "an option added later (test)"})


def _hashes(out: Path) -> dict[str, str]:
    return {
        f"{path.name}:{cell.cell_id}": cell.config_hash
        for path in GRIDS
        for cell in plan_cells(load_grid(path), out)
    }


def test_a_new_option_elsewhere_leaves_every_shipped_grid_cell_hash_unchanged(registries, tmp_path):
    before = _hashes(tmp_path)
    register_strategy("test-late")(type("Late", (NoExchange,), {"options": LateOptions}))
    # a GRAFT variant's own option too: graft cells do not read it
    late_graft = type(
        "LateGraft",
        (GraftExchange,),
        {
            "options": dataclasses.make_dataclass(
                "LateGraftOptions",
                [("late_k", int, field(default=2, metadata={"help": "a variant's option (test)"}))],
                frozen=True,
            )
        },
    )
    register_strategy("test-late-graft")(late_graft)
    assert {"late_share", "late_k"} <= {f.name for f in config_module.option_fields()}
    after = _hashes(tmp_path)
    assert len(before) > 100 and after == before


def test_the_hash_still_covers_every_option_the_cell_reads(tmp_path, registries):
    grid = load_grid(REPO / "configs" / "grids" / "compare_tiny.yaml")
    before = {c.cell_id: c for c in plan_cells(grid, tmp_path)}
    graft = registry_module._PRESETS["graft"]
    registry_module._PRESETS["graft"] = lambda: dataclasses.replace(graft(), delta=0.7)
    after = {c.cell_id: c.config_hash for c in plan_cells(grid, tmp_path)}
    changed = {cell for cell in before if before[cell].config_hash != after[cell]}
    assert changed and all(before[cell].algorithm == "graft" for cell in changed)
    graft_cell = next(c for c in before.values() if c.algorithm == "graft")
    read = graft_cell.hash_inputs["train"]["resolved_algorithm"]
    assert read["delta"] == 0.8 and "capability_window" not in read  # HACPO's, not read


def test_any_strategy_training_peers_by_nll_reads_may_set_and_hashes_sgt_coef(registries):
    """The loss scales the 'nll' term by `sgt_coef` whatever the strategy, so a strategy that
    allows peer_objective='nll' reads it: it may be set there and is in the cell's hash."""
    register_strategy("test-nll")(type("NllPeers", (NoExchange,), {"peer_objectives": ("nll",)}))
    config = config_module.AlgorithmConfig(
        exchange="test-nll", peer_objective="nll", sgt_coef=0.5
    ).validate()
    assert options_read(config)["sgt_coef"] == 0.5
    assert "sgt_coef" not in options_read(config_module.AlgorithmConfig(exchange="graft"))
    with pytest.raises(
        OptionError,
        match=r"sgt_coef: 0\.5 must be 0\.1 unless exchange='sgt' or peer_objective='nll'$",
    ):
        config_module.AlgorithmConfig(exchange="graft", sgt_coef=0.5).validate()


def test_the_committed_gap_cells_hash_as_the_grids_plan_them_now():
    """Every committed finished cell is current (not stale), with the recorded builds' weights
    standing in for builds this checkout may not have."""
    grids = [load_grid(path) for path in GAP_GRIDS]
    results = json.loads((GAP / "part3" / "results.json").read_text())
    identities = rehash.recorded_identities(results, grids)
    cells = {}
    for grid in grids:
        for cell in plan_cells(grid, GAP, identities=identities):
            cells.setdefault(cell.cell_id, cell)
    outcome = rehash.migrate(list(cells.values()), write=False)
    assert (len(outcome["current"]), outcome["moved"], outcome["failed"]) == (136, [], [])


def test_a_result_records_its_paths_relative_to_the_grid_output(tmp_path):
    grid = load_grid(REPO / "configs" / "grids" / "compare_tiny.yaml")
    cell = next(c for c in plan_cells(grid, tmp_path) if c.config is not None)
    assert out_of(cell) == tmp_path.resolve()
    result = {"config": cell.config.to_dict(), "models": [{"checkpoint": cell.config.run_dir}]}
    portable = portable_result(result, out_of(cell))
    assert portable["config"]["run_dir"] == f"cells/{cell.cell_id}/run"
    assert portable["models"][0]["checkpoint"] == f"cells/{cell.cell_id}/run"
    assert portable["config"]["seed"] == cell.config.seed


ABSOLUTE = re.compile(r"""["'=\s(](/[A-Za-z][\w.-]*/[^"'\s)]*)""")  # any /top/... path


def test_no_committed_result_names_an_absolute_path():
    found = {}
    for path in sorted((REPO / "docs" / "results").rglob("*")):
        if path.suffix not in {".json", ".md", ".txt", ".log", ".yaml", ".csv"}:
            continue
        hits = ABSOLUTE.findall(path.read_text(encoding="utf-8"))
        if hits:
            found[path.relative_to(REPO).as_posix()] = hits[0]
    assert found == {}  # cells, gap reports (build dirs) and device checks: portable paths
