"""The gap study's scores and contrasts: a model's pass@1 on its own gap set, each contrast
(a weighted sum of (label, model) scores) on exactly the seeds whose cells all finished,
its paired bootstrap, t-interval and MDE, and section 5's verdicts, in every scope."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from benchmarks.compare.report import Record
from benchmarks.study.gap.cells import Study
from benchmarks.study.gap.design import ROLES, SCOPES, Contrast
from benchmarks.study.stats import (
    Difference,
    detectable_effect,
    paired_contrast,
    t_interval,
    verdict,
)

GAP_MODEL = "gap"  # the one model name of the records `paired_contrast` sees here
NOT_RESOLVABLE = "not resolvable here"

Term = tuple[str, str, float]  # (label, model, weight): weight x the model's gap score


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
