"""The gap grids' models and cells: each model's gap and strength evaluation sets, every
planned cell read once (finished, stale or missing), and the `Study` the contrasts are
computed from."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.compare.cells import Cell, plan_cells, read_result
from benchmarks.compare.grid import GridError, GridSpec
from benchmarks.compare.report import Record, cell_records
from benchmarks.study.gap.design import ROLES
from benchmarks.study.report import metrics_logs
from graft_env.data.procedural.families import FAMILIES
from graft_env.policies.tiny.config import pair_of


@dataclass(frozen=True)
class GapModel:
    """A gap pair's member: its gap family's evaluation set, and its strength's."""

    name: str
    pair: str  # the pair's name: gap-d0, ..., gap-weak
    role: str  # "a" (the pair's first member) or "b"
    family: str  # its gap family (procedural.families)
    gap_set: str
    strength_set: str
    nominal_dose: float


def gap_models(grids: Sequence[GridSpec]) -> dict[str, GapModel]:
    """Every model the grids' pairs name, with its gap and strength evaluation sets."""
    found = {}
    for grid in grids:
        for pair in grid.pairs:
            for model in pair.models:
                found[model] = _gap_model(grid, model)
    return found


def _gap_model(grid: GridSpec, model: str) -> GapModel:
    config = pair_of(model)
    if config is None or config.gap is None:
        raise GridError(f"{grid.name}: pairs: {model} is not a member of a gap pair (GAP_PAIRS)")
    names = [spec.name for spec in config.models]
    member = names.index(model)
    sets = [f"procedural/{FAMILIES[family].skill}" for family in config.gap.families]
    missing = [name for name in sets if name not in grid.eval.sets]
    if missing:
        raise GridError(f"{grid.name}: eval.sets lacks {missing[0]}, a gap family's set")
    return GapModel(
        name=model,
        pair=config.name,
        role=ROLES[member],
        family=config.gap.families[member],
        gap_set=sets[member],
        strength_set=sets[1 - member],
        nominal_dose=config.gap.dose,
    )


@dataclass
class Cells:
    """The grids' planned cells (one per cell id) and what is on disk for them."""

    planned: dict[str, Cell] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    grids: dict[str, dict[str, int]] = field(default_factory=dict)

    def read(self, cell: Cell) -> str:
        """Read one cell: "finished", "stale" (its directory holds another config's run,
        which is not read) or "missing"."""
        self.planned[cell.cell_id] = cell
        try:
            result = read_result(cell)
        except GridError:
            self.stale.append(cell.cell_id)
            return "stale"
        if result is None:
            self.missing.append(cell.cell_id)
            return "missing"
        self.results.append(result)
        return "finished"


def read_cells(grids: Sequence[GridSpec], out: Path) -> Cells:
    """Plan every grid's cells under `out` and read the finished ones, once per cell id; a
    cell id two grids plan with different hashes is an error (the grids share their cells)."""
    cells = Cells()
    status: dict[str, str] = {}
    for grid in grids:
        counts = dict.fromkeys(("planned", "finished", "stale", "missing"), 0)
        for cell in plan_cells(grid, out):
            known = cells.planned.get(cell.cell_id)
            if known is None:
                status[cell.cell_id] = cells.read(cell)
            elif known.config_hash != cell.config_hash:
                raise GridError(
                    f"{grid.name}: cell {cell.cell_id} hashes {cell.config_hash}, another grid "
                    f"{known.config_hash}: the gap grids must plan a shared cell alike"
                )
            counts["planned"] += 1
            counts[status[cell.cell_id]] += 1
        cells.grids[grid.name] = counts
    return cells


@dataclass
class Study:
    """What the contrasts are computed from."""

    gaps: Mapping[str, GapModel]
    records: Mapping[tuple[str, str], Mapping[Any, Record]]  # (label, model) -> seed -> record
    planned: Mapping[tuple[str, str], set]  # (label, model) -> the seeds the grids plan
    results: Sequence[Mapping[str, Any]]
    logs: Mapping[str, Sequence[Mapping[str, Any]]]  # cell id -> metrics rows
    bootstrap: Mapping[str, int]
    memo: dict[tuple, dict[str, Any]] = field(default_factory=dict)

    def member(self, pair: str, role: str) -> str | None:
        return next((g.name for g in self.gaps.values() if (g.pair, g.role) == (pair, role)), None)


def make_study(cells: Cells, gaps: Mapping[str, GapModel], runs: Path, **bootstrap: int) -> Study:
    records: dict[tuple[str, str], dict[Any, Record]] = defaultdict(dict)
    for record in cell_records(cells.results):
        records[(record["label"], record["model"])][record["seed"]] = record
    planned: dict[tuple[str, str], set] = defaultdict(set)
    for cell in cells.planned.values():
        for agent in cell.models:
            planned[(cell.label, agent)].add(cell.seed)
    logs = metrics_logs(runs, cells.results)
    return Study(gaps, dict(records), dict(planned), cells.results, logs, bootstrap)
