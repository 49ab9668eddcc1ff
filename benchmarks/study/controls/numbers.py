"""The peer-control study's numbers: each build's cells read into a gap `Study`, the builds
merged (their seeds are disjoint), every contrast's per-seed values with the t-interval (the
primary interval), the gap study's paired bootstrap beside it, the t-test's p and Holm over
the primary contrasts, per build and per model, and the doses measured both ways."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.compare.grid import GridSpec, load_grid
from benchmarks.study.controls.design import (
    ALPHA,
    BOOTSTRAP,
    BUILDS,
    CONTRASTS,
    SCOPES,
    Build,
    Contrast,
    build_of,
)
from benchmarks.study.gap.cells import Cells, Study, gap_models, make_study, read_cells
from benchmarks.study.gap.contrasts import Term, assess, gap_score
from benchmarks.study.gap.descriptive import pair_provenance
from benchmarks.study.multiplicity import holm, t_test, welch_interval
from graft_env.policies.cache import default_cache_dir

BuildStudy = tuple[Build, GridSpec, Cells, Study]


def read_builds(
    out: Path, builds: Sequence[Build] = BUILDS, root: Path = Path(".")
) -> list[BuildStudy]:
    """Each build's grid planned under <out>/<build> and its finished cells read."""
    found = []
    for build in builds:
        grid = load_grid(root / build.grid)
        cells = read_cells([grid], out / build.name)
        study = make_study(cells, gap_models([grid]), out / build.name, **BOOTSTRAP)
        found.append((build, grid, cells, study))
    return found


def merged(studies: Sequence[Study]) -> Study:
    """One `Study` of every build's trained cells (seeds are disjoint across builds; the base
    cells, one per build and model, stay with their build)."""
    records: dict[tuple[str, str], dict[Any, Any]] = defaultdict(dict)
    planned: dict[tuple[str, str], set] = defaultdict(set)
    logs, results = {}, []
    for study in studies:
        for key, by_seed in study.records.items():
            if key[0] != "base":
                records[key].update(by_seed)
        for key, seeds in study.planned.items():
            if key[0] != "base":
                planned[key] |= seeds
        logs.update(study.logs)
        results += [r for r in study.results if r["label"] != "base"]
    first = studies[0]
    return Study(first.gaps, dict(records), dict(planned), results, logs, first.bootstrap)


def contrast_terms(study: Study, contrast: Contrast, scope: str) -> list[Term]:
    """arm - baseline on the model of one role, or on both at half weight (pooled)."""
    roles = ("a", "b") if scope == "pooled" else (scope,)
    weight = 0.5 if scope == "pooled" else 1.0
    terms = []
    for role in roles:
        model = next(g.name for g in study.gaps.values() if g.role == role)
        terms += [(contrast.arm, model, weight), (contrast.baseline, model, -weight)]
    return terms


def contrast_entry(
    study: Study, contrast: Contrast, scope: str, builds: Sequence[Build] = BUILDS
) -> dict[str, Any]:
    """One contrast in one scope: per-seed values (with their build), mean, t-interval,
    bootstrap interval, sd, MDE, t statistic and two-sided p, and with a margin the
    non-inferiority verdicts on both intervals; or "not run"."""
    found = assess(study, contrast_terms(study, contrast, scope), contrast.margin)
    entry: dict[str, Any] = {
        "contrast": contrast.name,
        "arm": contrast.arm,
        "baseline": contrast.baseline,
        "scope": scope,
        "primary": contrast.primary,
        "prediction": contrast.prediction,
        "seeds": [int(s) for s in found["seeds"]],
        "excluded_seeds": found["excluded_seeds"],
        "per_seed": {
            s: {"value": v, "build": build_of(int(s), builds)} for s, v in found["per_seed"].items()
        },
        "not_run": found["not_run"],
    }
    if contrast.margin:
        entry["margin"] = contrast.margin
        verdicts = {"t": found["t_verdict"], "bootstrap": found["bootstrap_verdict"]}
        entry["margin_verdicts"] = verdicts
    values = list(found["per_seed"].values())
    if found["not_run"] is not None or len(values) < 2:
        return {**entry, "mean": None, "t_interval": None, "bootstrap": None, "p": None}
    t, p = t_test(values)
    boot = found["bootstrap"]
    return {
        **entry,
        "mean": boot["mean"],
        "t_interval": found["t_interval"],
        "bootstrap": {"low": boot["low"], "high": boot["high"]},
        "sd": found["sd"],
        "mde": found["mde"],
        "t": t,
        "p": p,
        "direction": _direction(found["t_interval"]),
    }


def _direction(interval: Mapping[str, float]) -> str:
    if interval["low"] > 0:
        return "above 0"
    return "below 0" if interval["high"] < 0 else "contains 0"


def primary_verdicts(entries: Sequence[dict[str, Any]], alpha: float = ALPHA) -> None:
    """Holm over the pooled primary contrasts that ran: each gets `p_holm` and its verdict
    (supported / reversed / not shown / not resolvable here), in place."""
    primary = [e for e in entries if e["primary"] and e["scope"] == "pooled" and e["p"] is not None]
    for entry, adjusted in zip(primary, holm([e["p"] for e in primary]), strict=True):
        entry["p_holm"] = adjusted
        entry["verdict"] = verdict(entry["mean"], adjusted, entry["mde"], alpha)


def verdict(mean: float, p_holm: float, mde: float | None, alpha: float = ALPHA) -> str:
    """Section 5's rule: supported (adjusted p < alpha, mean > 0), reversed (mean < 0), else
    not shown, or not resolvable here where the MDE exceeds |mean|."""
    if p_holm < alpha:
        return "supported" if mean > 0 else "reversed"
    return "not resolvable here" if mde is not None and mde > abs(mean) else "not shown"


def all_contrasts(
    studies: Sequence[BuildStudy],
    pooled: Study,
    contrasts: Sequence[Contrast] = CONTRASTS,
    builds: Sequence[Build] = BUILDS,
) -> dict[str, Any]:
    """Every contrast on both builds together (with Holm on the primary ones), per build, and
    the difference between the builds' per-seed values (Welch)."""
    together = [contrast_entry(pooled, c, s, builds) for c in contrasts for s in SCOPES]
    primary_verdicts(together)
    per_build = {
        build.name: [contrast_entry(study, c, s, builds) for c in contrasts for s in SCOPES]
        for build, _, _, study in studies
    }
    return {
        "pooled_builds": together,
        "per_build": per_build,
        "build_difference": _between(together, builds),
    }


def _between(entries: Sequence[dict[str, Any]], builds: Sequence[Build]) -> list[dict[str, Any]]:
    """Per pooled contrast: the first build's per-seed mean minus the second's, Welch
    interval."""
    rows = []
    for entry in entries:
        if entry["scope"] != "pooled":
            continue
        groups = [
            [v["value"] for v in entry["per_seed"].values() if v["build"] == b.name] for b in builds
        ]
        if min(map(len, groups)) >= 2:
            rows.append({"contrast": entry["contrast"], **welch_interval(*groups)})
    return rows


def doses(studies: Sequence[BuildStudy]) -> dict[str, Any]:
    """Per build and model: the pre-registered dose (the build report's test split: pass@1
    and all-fail share on its gap family, T = 1.0, n = 8) beside the evaluation-temperature
    base score (its base cell: T = 0.6, k = 16 on the 1,063 problems), and the provenance."""
    out = {}
    for build, grid, _, study in studies:
        provenance = pair_provenance([grid], study.gaps)
        pair = next(iter(provenance.values()))
        report = _build_report(pair["build_dir"])
        members = {}
        for gap in study.gaps.values():
            base = study.records.get(("base", gap.name), {}).get(None)
            skill = None if report is None else report["models"][gap.name]["skills"][gap.family]
            members[gap.name] = {
                "family": gap.family,
                "report_pass_at_1": None if skill is None else 100 * skill["pass_at_1"],
                "report_all_fail": None if skill is None else 100 * skill["all_fail"],
                "report_prompts": None
                if report is None
                else report["prompts_per_skill"].get(gap.family),
                "base_eval_pass_at_1": None if base is None else gap_score(base, gap.gap_set),
                "base_eval_strength": None if base is None else gap_score(base, gap.strength_set),
            }
        out[build.name] = {"build_seed": build.build_seed, "provenance": pair, "members": members}
    return out


def _build_report(build_dir: str | None) -> dict[str, Any] | None:
    """The build's report.json, or None where the build is not on this machine (`build_dir`
    as provenance records it: `$GRAFT_CACHE_DIR/<pair>-<key>`, `portable_path`)."""
    if build_dir is not None:
        build_dir = build_dir.replace("$GRAFT_CACHE_DIR", str(default_cache_dir()), 1)
    path = None if build_dir is None else Path(build_dir) / "report.json"
    return json.loads(path.read_text()) if path is not None and path.is_file() else None
