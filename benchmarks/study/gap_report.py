"""The gap study's report (issue 29; docs/study/GAP-PREREGISTRATION.md, sections 2-6).

    python -m benchmarks.study.gap_report --out runs/compare/gap \\
        [--grids configs/grids/gap.yaml configs/grids/gap-n32.yaml configs/grids/gap-controls.yaml]

Plans the grids' cells under --out (`plan_cells`): a cell is read only if its result.json
holds the hash planned now, a cell that holds another is listed as stale and never read, a
cell without a result is missing. Writes <out>/gap_report/results.json (every number,
every per-seed value), report.md and, where there is data, dose_response.png and
learning_curves.png.

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
  flags and torch / oneDNN versions (`kernel_provenance`), and the cells' package versions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from benchmarks.compare.cells import Cell, grid_models, plan_cells, read_result
from benchmarks.compare.grid import GridError, GridSpec, load_grid
from benchmarks.compare.plots import band
from benchmarks.compare.report import Record, cell_records, provenance_summary
from benchmarks.study.plots import _legend, _style, plot_learning
from benchmarks.study.report import (
    GRAFT,
    GRPO8,
    GRPO32,
    NO_COMPAT,
    NO_FLOOR,
    STYLES,
    eval_series,
    funnel,
    metrics_logs,
)
from benchmarks.study.stats import (
    Difference,
    contrast_replicates,
    detectable_effect,
    paired_contrast,
    t_interval,
    verdict,
)
from graft_env.data.procedural.families import FAMILIES
from graft_env.policies.cache import default_cache_dir, kernel_provenance
from graft_env.policies.tiny.config import pair_of

GRIDS = (
    "configs/grids/gap.yaml",
    "configs/grids/gap-n32.yaml",
    "configs/grids/gap-controls.yaml",
)
REPORT_DIR = "gap_report"
DOSES = ("gap-d0", "gap-d5", "gap-d15", "gap-d30")
LOW, HIGH, STRONG, WEAK = "gap-d0", "gap-d30", "gap-strong", "gap-weak"
ARMS = (GRAFT, NO_FLOOR, NO_COMPAT)  # the exchange arms
ROLES = ("a", "b")
SCOPES = (*ROLES, "pooled")
GAP_MODEL = "gap"  # the one model name of the records `paired_contrast` sees here
NOT_RESOLVABLE = "not resolvable here"
PROBE_STEPS = 3  # the probe's steps (section 1), at seed 0
PAPER = {  # the paper's numbers as the pre-registration quotes them (section 4)
    "H4": "-1.9 / -3.6 points without the floor",
    "H6": "-8.4 / -2.5 points without the compatibility weights",
}

Term = tuple[str, str, float]  # (label, model, weight): weight x the model's gap score


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


@dataclass(frozen=True)
class Contrast:
    """A pre-registered contrast: `terms` (label, pair, weight) of the scores of each pair's
    member of one role; > -margin (superiority at margin 0, non-inferiority above), or, for
    a null control, an interval that contains 0."""

    name: str
    hypothesis: str
    claim: str
    terms: tuple[tuple[str, str, float], ...]
    margin: float = 0.0
    null: bool = False


def _minus(arm: str, base: str, pair: str) -> tuple[tuple[str, str, float], ...]:
    return ((arm, pair, 1.0), (base, pair, -1.0))


def contrast_specs() -> list[Contrast]:
    """Section 4's contrasts, H2 apart (`slope_terms`); then arm - GRPO n=8 at every dose
    (the dose-response, "D"), of which gap-d0's are H1, H1f and H1w."""
    names = {GRAFT: "GRAFT", NO_FLOOR: "GRAFT w/o floor", NO_COMPAT: "GRAFT w/o compat."}
    specs = [
        Contrast("H1", "H1", f"{GRAFT} - {GRPO8} at {LOW} > 0", _minus(GRAFT, GRPO8, LOW)),
        Contrast("H1f", "H1f", f"{NO_FLOOR} - {GRPO8} at {LOW} > 0", _minus(NO_FLOOR, GRPO8, LOW)),
        Contrast(
            "H1w", "H1w", f"{NO_COMPAT} - {GRPO8} at {LOW} > 0", _minus(NO_COMPAT, GRPO8, LOW)
        ),
    ]
    for arm in ARMS:
        terms = (*_minus(arm, GRPO8, LOW), (arm, HIGH, -1.0), (GRPO8, HIGH, 1.0))
        claim = f"({arm} - {GRPO8}) at {LOW} minus at {HIGH} > 0"
        specs.append(Contrast(f"H3 {names[arm]}", "H3", claim, terms))
    specs += [
        Contrast("H4", "H4", f"{GRAFT} - {NO_FLOOR} at {LOW} > 0", _minus(GRAFT, NO_FLOOR, LOW)),
        Contrast(
            "H6", "H6", f"{NO_FLOOR} - {NO_COMPAT} at {LOW} > 0", _minus(NO_FLOOR, NO_COMPAT, LOW)
        ),
    ]
    for arm in (GRAFT, NO_COMPAT):
        for pair in (LOW, HIGH):
            claim = f"{arm} - {GRPO32} at {pair} > -1.0"
            terms = _minus(arm, GRPO32, pair)
            specs.append(Contrast(f"H5 {names[arm]} {pair}", "H5", claim, terms, margin=1.0))
    for name, pair in (("N1", STRONG), ("N2", WEAK)):
        claim = f"{NO_COMPAT} - {GRPO8} on {pair}: interval contains 0"
        specs.append(Contrast(name, name, claim, _minus(NO_COMPAT, GRPO8, pair), null=True))
    for pair in DOSES:
        for arm in ARMS:
            claim = f"{arm} - {GRPO8} at {pair} > 0"
            specs.append(Contrast(f"D {pair} {names[arm]}", "D", claim, _minus(arm, GRPO8, pair)))
    return specs


# ---- the grids' cells and models


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


# ---- scores and contrasts


def gap_score(record: Record, name: str) -> float:
    """pass@1 on evaluation set `name` in points: the mean over its problems of each
    problem's share of correct samples (what `paired_contrast` averages)."""
    counts = record["problems"][name]
    return 100.0 * float(np.mean(list(counts.values()))) / record["samples"][name]


def gap_record(record: Record, label: str, gap_set: str) -> Record:
    """`record` as `paired_contrast` sees it here: model "gap", label `label`, its own gap
    set as measured and every other set zeroed (so set weights 1 on each gap set take
    each model's score on its own gap only)."""
    problems = {
        name: dict(counts) if name == gap_set else dict.fromkeys(counts, 0)
        for name, counts in record["problems"].items()
    }
    return {**record, "label": label, "model": GAP_MODEL, "problems": problems}


def verdicts(mean: float, low: float, high: float, margin: float, null: bool) -> str:
    """Section 5's rule on one interval: supported above -margin, refuted below, else
    unresolved; a null control: supported if the interval contains 0, else refuted."""
    if null:
        return "supported" if low <= 0.0 <= high else "refuted"
    return verdict(Difference(mean=mean, low=low, high=high, seeds=0, problems=0), margin)


def _term_name(label: str, model: str) -> str:
    return f"{label} on {model}"


def assess(study: Study, terms: Sequence[Term], margin: float = 0.0, null: bool = False) -> dict:
    """One contrast (a weighted sum of gap scores) on the seeds all its cells finished."""
    key = (tuple(terms), margin, null)
    if key not in study.memo:
        study.memo[key] = _assess(study, terms, margin, null)
    return study.memo[key]


def empty_entry(terms: Sequence[Term] = (), margin: float = 0.0, null: bool = False) -> dict:
    """A contrast's entry before (or without) its numbers: "not run"."""
    return {
        "terms": [{"label": label, "model": model, "weight": w} for label, model, w in terms],
        "threshold": "interval contains 0" if null else f"> {-margin:g}",
        "seeds": [],
        "excluded_seeds": {},
        "per_seed": {},
        "bootstrap": None,
        "t_interval": None,
        "sd": None,
        "mde": None,
        "bootstrap_verdict": None,
        "t_verdict": None,
        "disagree": False,
        "verdict": "not run",
        "not_run": None,
    }


def _assess(study: Study, terms: Sequence[Term], margin: float, null: bool) -> dict[str, Any]:
    entry = _seeded_entry(study, terms, margin, null)
    if entry["not_run"] is None:
        records, weights, sets = _bootstrap_inputs(study, terms, entry["seeds"])
        boot = paired_contrast(records, GAP_MODEL, weights, sets, **study.bootstrap)
        _judge(entry, boot, margin, null)
    return entry


def _seeded_entry(study: Study, terms: Sequence[Term], margin: float, null: bool) -> dict:
    """A contrast's entry with its seeds (those all its cells finished), the seeds left out
    and the cells they lack, and the per-seed values; or "not run" and why."""
    entry = empty_entry(terms, margin, null)
    pairs = [(label, model) for label, model, _ in terms]
    absent = [_term_name(*p) for p in dict.fromkeys(pairs) if not study.records.get(p)]
    if absent:
        entry["not_run"] = "no finished cells of " + ", ".join(absent)
        return entry
    seeds = sorted(set.intersection(*(set(study.records[p]) for p in pairs)))
    planned = set().union(*(study.planned.get(p, set()) for p in pairs))
    entry["excluded_seeds"] = {
        str(s): [_term_name(*p) for p in dict.fromkeys(pairs) if s not in study.records[p]]
        for s in sorted(planned - set(seeds))
    }
    if not seeds:
        entry["not_run"] = "no seed has every cell of the contrast finished"
        return entry
    entry["seeds"] = seeds
    entry["per_seed"] = {
        str(s): sum(
            w * gap_score(study.records[(label, m)][s], study.gaps[m].gap_set)
            for label, m, w in terms
        )
        for s in seeds
    }
    return entry


def _bootstrap_inputs(
    study: Study, terms: Sequence[Term], seeds: Sequence[Any]
) -> tuple[list[Record], dict[str, float], dict[str, float]]:
    """The terms as `paired_contrast` takes them: one gap record per (term, seed), labelled
    by the term, the label weights, and weight 1 on each gap set the terms name."""
    weights: dict[str, float] = defaultdict(float)
    records = []
    for label, model, weight in terms:
        name = _term_name(label, model)
        weights[name] += weight
        gap_set = study.gaps[model].gap_set
        records += [gap_record(study.records[(label, model)][s], name, gap_set) for s in seeds]
    records = list({(r["label"], r["seed"]): r for r in records}.values())
    sets = dict.fromkeys(sorted({study.gaps[m].gap_set for _, m, _ in terms}), 1.0)
    return records, dict(weights), sets


def _judge(entry: dict[str, Any], boot: Difference, margin: float, null: bool) -> None:
    """Section 5's verdicts on the entry's bootstrap interval and its per-seed t-interval;
    "not resolvable here" where unresolved and the MDE exceeds the distance to the threshold."""
    entry["bootstrap"] = asdict(boot)
    entry["bootstrap_verdict"] = verdicts(boot.mean, boot.low, boot.high, margin, null)
    entry["verdict"] = entry["bootstrap_verdict"]
    values = list(entry["per_seed"].values())
    if len(values) >= 2:
        low, high = t_interval(values)
        entry["t_interval"] = {"low": low, "high": high}
        entry["sd"] = float(np.std(values, ddof=1))
        entry["mde"] = detectable_effect(values)
        entry["t_verdict"] = verdicts(boot.mean, low, high, margin, null)
        entry["disagree"] = entry["t_verdict"] != entry["bootstrap_verdict"]
        distance = abs(boot.mean + margin)  # from the threshold
        if entry["verdict"] == "unresolved" and entry["mde"] > distance:
            entry["verdict"] = NOT_RESOLVABLE


def scoped_terms(study: Study, contrast: Contrast, scope: str) -> list[Term] | None:
    """The contrast's terms for the models of one role, or both at half weight (pooled);
    None if a pair it names is in none of the grids."""
    terms = []
    for role in ROLES if scope == "pooled" else (scope,):
        for label, pair, weight in contrast.terms:
            model = study.member(pair, role)
            if model is None:
                return None
            terms.append((label, model, weight / 2 if scope == "pooled" else weight))
    return terms


def contrast_entries(study: Study, contrasts: Sequence[Contrast]) -> list[dict[str, Any]]:
    """Every contrast in every scope (a, b, pooled)."""
    entries = []
    for contrast in contrasts:
        for scope in SCOPES:
            terms = scoped_terms(study, contrast, scope)
            head = {
                "contrast": contrast.name,
                "hypothesis": contrast.hypothesis,
                "claim": contrast.claim,
                "scope": scope,
                "margin": contrast.margin,
                "null": contrast.null,
            }
            if terms is None:
                pairs = sorted({pair for _, pair, _ in contrast.terms})
                reason = f"a pair of {', '.join(pairs)} is in none of the grids read"
                entries.append({**head, **empty_entry(), "not_run": reason})
            else:
                entries.append({**head, **assess(study, terms, contrast.margin, contrast.null)})
    return entries


# ---- H2: the slope over the measured gate candidates


def candidates_per_step(rows: Sequence[Mapping[str, Any]], source: str, agent: str) -> float | None:
    """Mean over the steps of a cell's gate candidates (Eq.4) of the direction source -> agent."""
    prefix = f"exchange/{source}->{agent}"
    values = [
        row.get(f"{prefix}/gate_candidates", row.get(f"{prefix}/candidates"))
        for row in rows
        if row.get("agent") == agent
    ]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def measured_candidates(study: Study, arm: str, model: str, seeds: Sequence[Any]) -> float | None:
    """Mean over `seeds` of the arm's cells' gate candidates per step received by `model`
    (None if a cell logged none)."""
    gap = study.gaps[model]
    partner = study.member(gap.pair, ROLES[1 - ROLES.index(gap.role)])
    found = [
        candidates_per_step(study.logs.get(result["cell"], []), partner, model)
        for result in study.results
        if result["label"] == arm and model in result["models"] and result["seed"] in seeds
    ]
    return float(np.mean(found)) if found and None not in found else None


def slope_entry(study: Study, arm: str) -> dict[str, Any]:
    """H2 for one exchange arm: the least-squares slope of the per-(dose, model) mean of
    arm - GRPO n=8 on that cell group's measured gate candidates per step, across the doses
    and both models. With x fixed at the measured means the slope is the linear contrast
    sum_i c_i (arm - GRPO n=8)_i, c_i = (x_i - mean x) / sum_j (x_j - mean x)^2; its
    per-seed values are the same contrast per seed (the t-interval and MDE are over them).
    Its bootstrap interval resamples within each dose, as section 5 registers it
    (`slope_bootstrap`). Doses without finished cells are left out and listed
    (`doses_missing`)."""
    present = [
        (pair, model)
        for pair in DOSES
        for role in ROLES
        if (model := study.member(pair, role)) is not None
        and study.records.get((arm, model))
        and study.records.get((GRPO8, model))
    ]
    doses = sorted({pair for pair, _ in present}, key=DOSES.index)
    entry = {
        "contrast": f"H2 {arm}",
        "hypothesis": "H2",
        "claim": f"slope of ({arm} - {GRPO8}) over the gate candidates per step > 0",
        "scope": "both models",
        "margin": 0.0,
        "null": False,
        **empty_entry(),
        "doses": doses,
        "doses_missing": [pair for pair in DOSES if pair not in doses],
        "points": [],
        "bootstrap_streams": {},
    }
    if len(doses) < 2:
        entry["not_run"] = f"finished cells of {arm} and {GRPO8} at {len(doses)} dose(s)"
        return entry
    found = [set(study.records[(label, m)]) for _, m in present for label in (arm, GRPO8)]
    seeds = sorted(set.intersection(*found))
    for pair, model in present:
        x = measured_candidates(study, arm, model, seeds) if seeds else None
        entry["points"].append({"pair": pair, "model": model, "candidates_per_step": x})
    used = [p for p in entry["points"] if p["candidates_per_step"] is not None]
    xs = np.array([p["candidates_per_step"] for p in used])
    spread = float(((xs - xs.mean()) ** 2).sum()) if used else 0.0
    if not seeds or len(used) < 2 or spread == 0.0:
        entry["not_run"] = "no seed with every cell, or fewer than two distinct candidates per step"
        return entry
    terms = []
    for point, x in zip(used, xs, strict=True):
        point["coefficient"] = float((x - xs.mean()) / spread)
        model = point["model"]
        terms += [(arm, model, point["coefficient"]), (GRPO8, model, -point["coefficient"])]
        differences = [
            gap_score(study.records[(arm, model)][s], study.gaps[model].gap_set)
            - gap_score(study.records[(GRPO8, model)][s], study.gaps[model].gap_set)
            for s in seeds
        ]
        point["difference"] = float(np.mean(differences))
    entry.update(_seeded_entry(study, terms, 0.0, False))
    if entry["not_run"] is None:
        boot, entry["bootstrap_streams"] = slope_bootstrap(study, terms, entry["seeds"])
        _judge(entry, boot, 0.0, False)
    return entry


def slope_bootstrap(
    study: Study, terms: Sequence[Term], seeds: Sequence[Any]
) -> tuple[Difference, dict[str, list[int]]]:
    """H2's interval: each dose's part of the slope (sum over its models i of c_i (arm -
    GRPO n=8)_i, the coefficients held fixed) is bootstrapped on its own, `study.bootstrap`'s
    resamples with its own stream, seeded (bootstrap seed, the dose's index in DOSES); within
    a dose the seeds (its two models share a seed's cell) and the problems are resampled as
    in `paired_contrast`, independently of every other dose. The slope's replicates are the
    sum of the doses' replicates; the interval their 2.5 and 97.5 % quantiles. Returns it
    with each dose's stream seed (numpy's SeedSequence drops trailing zero words, so gap-d0's
    (0, 0) draws as seed 0 does)."""
    by_dose: dict[str, list[Term]] = defaultdict(list)
    for term in terms:
        by_dose[study.gaps[term[1]].pair].append(term)
    resamples, seed = study.bootstrap.get("resamples", 10_000), study.bootstrap.get("seed", 0)
    streams = {pair: [seed, DOSES.index(pair)] for pair in sorted(by_dose, key=DOSES.index)}
    parts = []
    for pair, stream in streams.items():
        records, weights, sets = _bootstrap_inputs(study, by_dose[pair], seeds)
        parts.append(
            contrast_replicates(records, GAP_MODEL, weights, sets, resamples=resamples, seed=stream)
        )
    replicates = np.sum([part.values for part in parts], axis=0)
    low, high = np.quantile(replicates, [0.025, 0.975])
    boot = Difference(
        mean=float(sum(part.mean for part in parts)),
        low=float(low),
        high=float(high),
        seeds=len(seeds),
        problems=max(part.problems for part in parts),
    )
    return boot, streams


# ---- descriptive: doses, scores, funnel, curves, provenance


def dose_table(study: Study) -> dict[str, dict[str, Any]]:
    """Per pair: the nominal dose, each member's measured dose (its base cell's pass@1 on
    its gap) and its peer's base pass@1 on that gap; the pooled dose (their mean)."""
    out: dict[str, dict[str, Any]] = {}
    for gap in study.gaps.values():
        pair = out.setdefault(gap.pair, {"nominal": 100 * gap.nominal_dose, "members": {}})
        base = study.records.get(("base", gap.name), {}).get(None)
        peer = study.member(gap.pair, "b" if gap.role == "a" else "a")
        peer_base = study.records.get(("base", peer), {}).get(None)
        pair["members"][gap.role] = {
            "model": gap.name,
            "family": gap.family,
            "gap_set": gap.gap_set,
            "measured": None if base is None else gap_score(base, gap.gap_set),
            "peer_on_gap": None if peer_base is None else gap_score(peer_base, gap.gap_set),
            "strength": None if base is None else gap_score(base, gap.strength_set),
        }
    for pair in out.values():
        measured = [m["measured"] for m in pair["members"].values()]
        pair["measured"] = None if None in measured else float(np.mean(measured))
    return out


def score_rows(study: Study) -> list[dict[str, Any]]:
    """Per (model, label): per-seed gap and strength pass@1, their means and sds."""
    rows = []
    for (label, model), by_seed in sorted(
        study.records.items(), key=lambda kv: (kv[0][1], kv[0][0])
    ):
        gap = study.gaps[model]
        seeds = sorted(by_seed, key=str)
        values = {
            kind: {str(s): gap_score(by_seed[s], name) for s in seeds}
            for kind, name in (("gap", gap.gap_set), ("strength", gap.strength_set))
        }
        row = {"model": model, "pair": gap.pair, "label": label, "seeds": [str(s) for s in seeds]}
        for kind, found in values.items():
            array = np.array(list(found.values()))
            row[kind] = {
                "mean": float(array.mean()),
                "sd": float(array.std(ddof=1)) if array.size > 1 else None,
                "per_seed": found,
            }
        row["rollouts_to_checkpoint"] = _mean_of(
            r.get("rollouts_to_checkpoint") for r in by_seed.values()
        )
        rows.append(row)
    return rows


def _mean_of(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def funnel_totals(study: Study) -> dict[str, dict[str, Any]]:
    """`study.report.funnel` of the exchange cells (totals and per-step means per direction)."""
    exchange = [r for r in study.results if r["label"] in ARMS]
    data = funnel(exchange, study.logs)
    for by_direction in data.values():
        for found in by_direction.values():
            steps = len(found["curves"].get("gate_candidates", {}).get("step", [])) or None
            found["totals"]["steps"] = steps
    return data


def first_steps(study: Study) -> list[dict[str, Any]]:
    """Per exchange arm, pair and direction: the seed-0 cell's first `PROBE_STEPS` steps'
    funnel, mean per step (gate candidates, kept prompts, floor pass = admitted /
    transferred, mean s), to hold beside the probe's tables in the pre-registration."""
    rows = []
    for result in study.results:
        if result["label"] not in ARMS or result["seed"] != 0:
            continue
        for agent in result["models"]:
            gap = study.gaps[agent]
            source = study.member(gap.pair, ROLES[1 - ROLES.index(gap.role)])
            prefix = f"exchange/{source}->{agent}"
            steps = [
                row
                for row in study.logs.get(result["cell"], [])
                if row.get("agent") == agent
                and row["step"] < PROBE_STEPS
                and f"{prefix}/prompts" in row
            ]
            if not steps:
                continue
            transferred = sum(row[f"{prefix}/transferred"] for row in steps)
            scores = [row.get(f"{prefix}/mean_s", row.get("exchange/s/mean")) for row in steps]
            rows.append(
                {
                    "label": result["label"],
                    "pair": gap.pair,
                    "direction": f"{source}->{agent}",
                    "steps": len(steps),
                    "gate_candidates": candidates_per_step(steps, source, agent),
                    "kept": float(np.mean([row[f"{prefix}/prompts"] for row in steps])),
                    "floor_pass": sum(row[f"{prefix}/admitted"] for row in steps) / transferred
                    if transferred
                    else None,
                    "mean_s": _mean_of(scores),
                }
            )
    return rows


def gap_curves(study: Study) -> dict[tuple[str, str], Any]:
    """(model, label) -> periodic-evaluation pass@1 on the model's gap set, mean +/- std."""
    series: dict[tuple[str, str], list[dict[int, float]]] = defaultdict(list)
    for result in study.results:
        for agent in result["models"]:
            found = eval_series(
                study.logs.get(result["cell"], []), agent, [study.gaps[agent].gap_set]
            )
            if found:
                series[(agent, result["label"])].append(found)
    return {key: band(members) for key, members in series.items()}


def pair_provenance(grids: Sequence[GridSpec], gaps: Mapping[str, GapModel]) -> dict[str, Any]:
    """Per pair: cache key, build directory, weights SHA-256 per member (`model_identity`,
    which the cells' hashes hold) and what its build.json recorded (seed, threads, digest)."""
    identities: dict[str, str] = {}
    for grid in grids:
        identities.update(grid_models(grid))
    out: dict[str, Any] = {}
    for gap in gaps.values():
        directory, rest = identities[gap.name].split("/", 1)
        digest = rest.rsplit("@", 1)[1]
        pair = out.setdefault(
            gap.pair,
            {"cache_key": directory.removeprefix(f"{gap.pair}-"), "build_dir": None, "members": {}},
        )
        build_file = default_cache_dir() / directory / "build.json"
        build = json.loads(build_file.read_text()) if build_file.is_file() else None
        if build is not None:
            pair["build_dir"] = str(build_file.parent)
            pair["seed"], pair["threads"] = build.get("seed"), build.get("threads")
        recorded = (build or {}).get("weights_sha256", {}).get(gap.name)
        pair["members"][gap.name] = {
            "weights_sha256": digest,
            "build_json_weights_sha256": recorded,
            "matches_build_json": None if recorded is None else recorded == digest,
        }
    return out


# ---- against the paper


def combined(entries: Sequence[Mapping[str, Any]], name: str) -> str:
    """One contrast over its scopes: supported if both models are, or the pooled mean is with
    neither model refuted; refuted alike; not run if no scope ran; else unresolved."""
    found = {e["scope"]: e["verdict"] for e in entries if e["contrast"] == name}
    a, b, pooled = (found.get(s, "not run") for s in SCOPES)
    if {a, b, pooled} == {"not run"}:
        return "not run"
    for side, other in (("supported", "refuted"), ("refuted", "supported")):
        if (a == b == side) or (pooled == side and other not in (a, b)):
            return side
    return "unresolved"


def _agreement(verdict_: str) -> str:
    return {"supported": "agree", "refuted": "disagree", "not run": "not run"}.get(
        verdict_, "unresolved"
    )


def _all(verdicts_: Sequence[str]) -> str:
    if "refuted" in verdicts_:
        return "refuted"
    if verdicts_ and all(v == "supported" for v in verdicts_):
        return "supported"
    return "not run" if all(v == "not run" for v in verdicts_) else "unresolved"


def against_paper(
    entries: Sequence[Mapping[str, Any]], scores: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Section 6: per claim of the paper, agree / disagree / unresolved from the verdicts."""
    v = {
        e["contrast"]: e["verdict"]
        if e["scope"] == "both models"
        else combined(entries, e["contrast"])
        for e in entries
    }
    others = {pair: v.get(f"D {pair} GRAFT", "not run") for pair in DOSES if pair != LOW}
    dose0 = [v.get(name, "not run") for name in ("H1", "H1f", "H1w")]
    h5 = [v.get(f"H5 GRAFT {p}", "not run") for p in (LOW, HIGH)]
    share = _rollout_share(scores)
    claims = [
        {
            "claim": f"GRAFT beats {GRPO8}",
            "paper": "GRAFT > GRPO n=8 (no number quoted in the pre-registration)",
            "here": f"H1 {v.get('H1', 'not run')}; other doses: "
            + ", ".join(f"{p} {x}" for p, x in others.items())
            + "; exchange helps at dose 0 (one of H1 / H1f / H1w): "
            + ("yes" if "supported" in dose0 else "no"),
            "agreement": _agreement(v.get("H1", "not run")),
        },
        {
            "claim": f"GRAFT approaches {GRPO32} at a quarter of the rollouts",
            "paper": "GRAFT within reach of GRPO n=32 with 1/4 of its rollouts",
            "here": f"H5 GRAFT at {LOW} {h5[0]}, at {HIGH} {h5[1]}; w/o compat. weights: "
            + ", ".join(f"{p} {v.get(f'H5 GRAFT w/o compat. {p}', 'not run')}" for p in (LOW, HIGH))
            + ("" if share is None else f"; GRAFT's rollouts per model {share:.0%} of n=32's"),
            "agreement": _agreement(_all(h5)),
        },
        {
            "claim": "the floor matters",
            "paper": PAPER["H4"],
            "here": f"H4 (GRAFT - w/o floor at {LOW}) {v.get('H4', 'not run')}",
            "agreement": _agreement(v.get("H4", "not run")),
        },
        {
            "claim": "the compatibility weights matter",
            "paper": PAPER["H6"],
            "here": f"H6 (w/o floor - w/o compat. weights at {LOW}) {v.get('H6', 'not run')}",
            "agreement": _agreement(v.get("H6", "not run")),
        },
    ]
    dose = [f"{name} {v[name]}" for name in v if name.startswith(("H2", "H3"))]
    nulls = [f"{name} {v.get(name, 'not run')}" for name in ("N1", "N2")]
    failed_null = [
        e["contrast"]
        for e in entries
        if e["contrast"] in ("N1", "N2")
        and v.get(e["contrast"]) == "refuted"
        and e["scope"] == "pooled"
        and e["bootstrap"]
        and e["bootstrap"]["mean"] > 0
    ]
    artefact = "supported" in dose0 and bool(failed_null)
    claims.append(
        {
            "claim": "when exchange helps (the dose-response)",
            "paper": "no dose-response in the paper",
            "here": "; ".join(dose + nulls)
            + (
                f"; a supported dose-0 gain with {', '.join(failed_null)} above 0 is read as an "
                "artefact of the exchange path, not transfer of the procedure (section 4)"
                if artefact
                else ""
            ),
            "agreement": "–",
            "artefact": artefact,
        }
    )
    return claims


def _rollout_share(scores: Sequence[Mapping[str, Any]]) -> float | None:
    """GRAFT's mean rollouts per model to its checkpoint over GRPO n=32's, at gap-d0."""

    def mean(label: str) -> float | None:
        return _mean_of(
            r["rollouts_to_checkpoint"] for r in scores if r["label"] == label and r["pair"] == LOW
        )

    ours, theirs = mean(GRAFT), mean(GRPO32)
    return ours / theirs if ours and theirs else None


# ---- the report


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
            "machine": kernel_provenance(),
            "pairs": pair_provenance(grids, gaps),
        },
    }


def _num(value: float | None, signed: bool = True) -> str:
    return "–" if value is None else (f"{value:+.1f}" if signed else f"{value:.1f}")


def _interval(found: Mapping[str, float] | None) -> str:
    return "–" if found is None else f"[{found['low']:+.1f}, {found['high']:+.1f}]"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _scope_name(entry: Mapping[str, Any]) -> str:
    models = sorted({t["model"] for t in entry.get("terms", [])})
    return f"{entry['scope']} ({', '.join(models)})" if entry["scope"] in ROLES else entry["scope"]


def _verdict_text(entry: Mapping[str, Any]) -> str:
    text = entry["verdict"]
    if entry.get("disagree"):
        text += f" (t-interval: {entry['t_verdict']}: FLAG, bootstrap and t disagree)"
    return text


def _contrast_rows(entries: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for e in entries:
        if e["verdict"] == "not run":
            rows.append(
                [e["contrast"], _scope_name(e), "–", "–", "–", "–", "–", "not run", e["not_run"]]
            )
            continue
        seeds = ",".join(str(s) for s in e["seeds"])
        excluded = "; ".join(
            f"seed {s} lacks {', '.join(c)}" for s, c in e["excluded_seeds"].items()
        )
        rows.append(
            [
                e["contrast"],
                _scope_name(e),
                seeds,
                _num(e["bootstrap"]["mean"]),
                _interval(e["bootstrap"]),
                _interval(e["t_interval"]),
                _num(e["mde"], signed=False),
                _verdict_text(e),
                "per seed "
                + ", ".join(f"{v:+.1f}" for v in e["per_seed"].values())
                + (f"; {excluded}" if excluded else ""),
            ]
        )
    return rows


def render(report: Mapping[str, Any]) -> str:
    """report.md."""
    cells = report["cells"]
    lines = [
        "# The gap study's report (issue 29)",
        "",
        "Generated by `python -m benchmarks.study.gap_report`; every number, with every per-seed "
        "value, is in `results.json`. Design, hypotheses and analysis: "
        "`docs/study/GAP-PREREGISTRATION.md`. Grids: "
        + ", ".join(report["grids"])
        + f". Cells finished: {cells['finished']} of {cells['planned']} planned "
        f"({cells['missing']} missing, {len(cells['stale'])} stale: written for another config "
        "or other weights, not read).",
        "",
        "Scores: pass@1 in points on the model's own gap family (gap-*-a: borrow subtractions, "
        "`procedural/subtraction`; gap-*-b: carry additions, `procedural/addition`); pooled: "
        "the mean of a and b. Bootstrap: two-level, paired, "
        f"{report['bootstrap']['resamples']} resamples, seed {report['bootstrap']['seed']}; "
        "t: mean +/- t(0.975, S-1) sd / sqrt(S) over the per-seed values; MDE: the smallest "
        "effect a paired t-test detects at 80 % power, (t(0.975, S-1) + t(0.80, S-1)) sd / "
        "sqrt(S). Each contrast uses exactly the seeds whose cells of it all finished.",
        "",
    ]
    lines += [
        f"- {name}: {c['finished']} of {c['planned']} cells finished, {c['missing']} missing, "
        f"{c['stale']} stale"
        for name, c in cells["per_grid"].items()
    ]
    if cells["stale"]:
        lines.append("- stale, not read: " + ", ".join(cells["stale"]))
    lines += ["", "## Doses (measured: each model's base pass@1 on its gap)", ""]
    header = ["pair", "nominal", "a: measured", "a: peer on it", "b: measured", "b: peer on it"]
    header += ["pooled", "cache key", "weights (a / b)"]
    provenance = report["provenance"]["pairs"]
    rows = []
    for pair, found in report["doses"].items():
        members = found["members"]
        built = provenance.get(pair, {})
        digests = [m["weights_sha256"][:12] for m in built.get("members", {}).values()]
        rows.append(
            [
                pair,
                _num(found["nominal"], False),
                *(
                    _num(members.get(r, {}).get(k), False)
                    for r in ROLES
                    for k in ("measured", "peer_on_gap")
                ),
                _num(found["measured"], False),
                built.get("cache_key", "–"),
                " / ".join(digests),
            ]
        )
    lines += [*_table(header, rows), ""]
    lines += ["## Scores", ""]
    header = ["model", "label", "seeds", "gap pass@1 (mean, sd)", "strength pass@1 (mean)"]
    rows = [
        [
            r["model"],
            r["label"],
            ",".join(r["seeds"]) if r["label"] != "base" else "–",
            f"{r['gap']['mean']:.1f} ({_num(r['gap']['sd'], False)})",
            f"{r['strength']['mean']:.1f}",
        ]
        for r in report["scores"]
    ]
    lines += [*_table(header, rows), ""]
    lines += ["## Contrasts (section 4)", ""]
    header = ["contrast", "scope", "seeds", "estimate", "bootstrap 95 %", "t 95 %", "MDE"]
    header += ["verdict", "detail"]
    main = [e for e in report["contrasts"] if e["hypothesis"] != "D"]
    lines += [*_table(header, _contrast_rows(main)), ""]
    lines += [
        "Verdicts: supported if the bootstrap interval lies above the threshold (0; H5: -1 "
        'point), refuted if below, else unresolved, and "not resolvable here" where the MDE '
        "exceeds the estimate's distance from the threshold. Null controls (N1, N2): supported "
        "if the interval contains 0. FLAG: the t-interval's verdict differs. H2 (points per "
        "gate candidate per step): the slope is a linear contrast of the per-(dose, model) "
        "differences, its coefficients fixed at the measured candidates; as section 5 "
        "registers it, its bootstrap resamples within each dose: each dose's part (its two "
        "models' differences times their coefficients) is resampled on its own, seeds and "
        "problems, with an independent stream per dose (seeded (bootstrap seed, dose index "
        "in gap-d0, gap-d5, gap-d15, gap-d30)), and the slope's replicates are the sums of "
        "the doses' replicates. Its t-interval and MDE are over the per-seed slopes.",
        "",
    ]
    for e in report["contrasts"]:
        if e["hypothesis"] == "H2" and e.get("doses_missing"):
            lines.append(
                f"- {e['contrast']}: computed over {', '.join(e['doses'])}; no finished cells "
                f"at {', '.join(e['doses_missing'])} (a deviation from the four doses)."
            )
    lines += ["", "## Dose-response: arm - GRPO n=8 per dose", ""]
    dose = [e for e in report["contrasts"] if e["hypothesis"] == "D"]
    lines += [*_table(header, _contrast_rows(dose)), "", "![dose-response](dose_response.png)", ""]
    lines += ["## Against the paper (section 6)", ""]
    rows = [[c["claim"], c["paper"], c["here"], c["agreement"]] for c in report["against_paper"]]
    lines += [*_table(["claim", "paper", "here", "agreement"], rows), ""]
    lines += _funnel_lines(report["funnel"])
    lines += _first_step_lines(report["first_steps"])
    lines += _provenance_lines(report["provenance"])
    return "\n".join(lines) + "\n"


def _funnel_lines(data: Mapping[str, Mapping[str, Any]]) -> list[str]:
    if not data:
        return []
    header = [
        "arm",
        "direction",
        "seeds",
        "gate candidates / step",
        "kept / step",
        "admitted share",
    ]
    header += ["clipped peer-token share", "mean s"]
    rows = []
    for label, by_direction in data.items():
        for direction, found in sorted(by_direction.items()):
            t = found["totals"]
            steps = t["steps"] or 1
            rows.append(
                [
                    label,
                    direction,
                    str(found["seeds"]),
                    f"{t['gate_candidates'] / steps:.2f}",
                    f"{t['prompts'] / steps:.2f}",
                    "–" if t["admitted_share"] is None else f"{100 * t['admitted_share']:.1f} %",
                    "–"
                    if t["clipped_share_peer"] is None
                    else f"{100 * t['clipped_share_peer']:.2f} %",
                    "–" if t["mean_s"] is None else f"{t['mean_s']:.3f}",
                ]
            )
    return ["## Exchange funnel over training (mean over seeds)", "", *_table(header, rows), ""]


def _first_step_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    if not rows:
        return []
    header = ["arm", "pair", "direction", "steps", "gate candidates", "kept", "floor pass"]
    header.append("mean s")
    body = [
        [
            r["label"],
            r["pair"],
            r["direction"],
            str(r["steps"]),
            _num(r["gate_candidates"], False),
            f"{r['kept']:.1f}",
            "–" if r["floor_pass"] is None else f"{100 * r['floor_pass']:.1f} %",
            "–" if r["mean_s"] is None else f"{r['mean_s']:.3f}",
        ]
        for r in rows
    ]
    return [
        f"## The cells' first {PROBE_STEPS} steps at seed 0 (beside the probe, section 1)",
        "",
        *_table(header, body),
        "",
        "Means per step; the probe's tables (docs/study/GAP-PREREGISTRATION.md, section 1 and "
        "its appendix) ran the same pairs, seed and steps before any cell.",
        "",
    ]


def _provenance_lines(provenance: Mapping[str, Any]) -> list[str]:
    machine = provenance["machine"]
    lines = [
        "## Provenance",
        "",
        f"- this machine: {machine.get('cpu')}; SIMD flags {machine.get('cpu_flags')}; torch "
        f"{machine.get('torch')} ({machine.get('torch_cpu_capability')} kernels), oneDNN "
        f"{machine.get('onednn')}, MKL {machine.get('mkl')}",
        "- the cells' code: "
        + ", ".join(
            f"{c['git_commit'][:10]}{' (dirty)' if c['git_dirty'] else ''}"
            for c in provenance["cell_commits"]
        ),
    ]
    for pair, found in provenance["pairs"].items():
        members = "; ".join(
            f"{m} {d['weights_sha256']}"
            + ("" if d["matches_build_json"] is not False else " (build.json records another)")
            for m, d in found["members"].items()
        )
        lines.append(f"- {pair}: key {found['cache_key']}, build {found['build_dir']}: {members}")
    lines.append(
        "- every finished cell's hash holds its models' cache key and weights SHA-256, so each "
        "result read here was trained and evaluated on exactly these builds"
    )
    return [*lines, ""]


def plot_dose_response(report: Mapping[str, Any], path: Path) -> Path | None:
    """arm - GRPO n=8 against the measured dose, one panel per scope, bootstrap intervals."""
    doses = report["doses"]
    found = [e for e in report["contrasts"] if e["hypothesis"] == "D" and e["verdict"] != "not run"]
    if not found:
        return None
    figure = Figure(figsize=(13.5, 4.2))
    axes = figure.subplots(1, len(SCOPES), squeeze=False)[0]
    drawn = []
    for axis, scope in zip(axes, SCOPES, strict=True):
        for arm in ARMS:
            points = []
            for e in found:
                pair = next(t for t in e["contrast"].split() if t.startswith("gap-"))
                if e["scope"] != scope or e["terms"][0]["label"] != arm:
                    continue
                x = (
                    doses[pair]["measured"]
                    if scope == "pooled"
                    else doses[pair]["members"][scope]["measured"]
                )
                if x is not None:
                    points.append((x, e["bootstrap"]))
            if not points:
                continue
            points.sort(key=lambda p: p[0])
            xs = [p[0] for p in points]
            ys = np.array([p[1]["mean"] for p in points])
            errors = [ys - [p[1]["low"] for p in points], [p[1]["high"] for p in points] - ys]
            axis.errorbar(xs, ys, yerr=errors, capsize=3, **_style(STYLES[arm]))
            drawn.append(arm)
        axis.axhline(0.0, color="grey", linewidth=0.8)
        axis.set_title(f"scope {scope}", fontsize=10)
        axis.set_xlabel("measured dose: base pass@1 on the gap (%)")
        axis.grid(alpha=0.3)
    axes[0].set_ylabel(f"arm - {GRPO8} (points)")
    _legend(figure, STYLES, [label for label in STYLES if label in drawn])
    figure.suptitle("Dose-response: mean over seeds, 95 % bootstrap intervals")
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    figure.savefig(path, dpi=110)
    return path


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
