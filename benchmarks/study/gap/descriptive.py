"""The gap study's descriptive numbers: the doses as measured, each (model, label)'s scores,
the exchange funnel, the cells' first steps beside the probe, the learning curves on the
gap sets, and each pair's build provenance."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.compare.cells import grid_models
from benchmarks.compare.grid import GridSpec
from benchmarks.compare.plots import band
from benchmarks.study.curves import eval_series, funnel
from benchmarks.study.gap.cells import GapModel, Study
from benchmarks.study.gap.contrasts import gap_score
from benchmarks.study.gap.design import ARMS, PROBE_STEPS, ROLES
from benchmarks.study.gap.slope import candidates_per_step
from graft_env.policies.cache import default_cache_dir, portable_path


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
    """`study.curves.funnel` of the exchange cells (totals and per-step means per direction)."""
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
    """Per pair: cache key, build directory (a committed build's where its grid pair names
    one), weights SHA-256 per member (`model_identity`, which the cells' hashes hold) and what
    its build.json recorded (seed, threads, digest)."""
    identities: dict[str, str] = {}
    committed = {}  # model -> the committed build its grid pair names (`build:`)
    for grid in grids:
        identities.update(grid_models(grid))
        committed |= {m: p.build for p in grid.pairs if p.build is not None for m in p.models}
    out: dict[str, Any] = {}
    for gap in gaps.values():
        directory, rest = identities[gap.name].split("/", 1)
        digest = rest.rsplit("@", 1)[1]
        pair = out.setdefault(
            gap.pair,
            {"cache_key": directory.removeprefix(f"{gap.pair}-"), "build_dir": None, "members": {}},
        )
        files = committed.get(gap.name)
        root = default_cache_dir() if files is None else Path(files.cache_dir)
        build_file = root / directory / "build.json"
        build = json.loads(build_file.read_text()) if build_file.is_file() else None
        if build is not None:
            pair["build_dir"] = portable_path(build_file.parent)
            pair["seed"], pair["threads"] = build.get("seed"), build.get("threads")
        recorded = (build or {}).get("weights_sha256", {}).get(gap.name)
        pair["members"][gap.name] = {
            "weights_sha256": digest,
            "build_json_weights_sha256": recorded,
            "matches_build_json": None if recorded is None else recorded == digest,
        }
    return out
