"""H2: the least-squares slope of arm - GRPO n=8 over the measured gate candidates per step,
across the doses and both models, with its bootstrap resampled within each dose as
section 5 registers it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from benchmarks.study.gap.cells import Study
from benchmarks.study.gap.contrasts import (
    GAP_MODEL,
    Term,
    _bootstrap_inputs,
    _judge,
    _seeded_entry,
    empty_entry,
    gap_score,
)
from benchmarks.study.gap.design import DOSES, ROLES
from benchmarks.study.report import GRPO8
from benchmarks.study.stats import Difference, contrast_replicates


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
    (`doses_missing`), as are the (dose, model) points whose cells kept no metrics log to
    measure the candidates from (`points_unmeasured`)."""
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
    entry["points_unmeasured"] = [  # cells without a metrics log: no x, left out, listed
        f"{p['pair']} ({p['model']})" for p in entry["points"] if p["candidates_per_step"] is None
    ]
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
