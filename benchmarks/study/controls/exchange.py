"""What each exchange arm moved, from the cells' metrics logs: per receiver, the mean per
step of the groups it received (GRAFT and the shuffled-reward peer: the peer prompts moved;
the twin peer: the prompts GRAFT's gate would have moved and those the twin filled, and the
responses it re-sampled), the twin's matched share, and S4, the gain per moved group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from algorithms.exchange.controls import TWIN_SUFFIX
from benchmarks.study.controls.design import GRAFT, GRPO, SHUFFLED, TWIN, build_of
from benchmarks.study.gap.cells import Study
from benchmarks.study.gap.contrasts import gap_score
from benchmarks.study.multiplicity import t_test
from benchmarks.study.stats import t_interval


def receiver_means(rows: Sequence[Mapping[str, Any]], label: str, receiver: str, peer: str):
    """Per-step means of one receiver's rows: `moved` (groups it trained on from the exchange),
    and for the twin `gated` and `resampled` too; None without logged steps."""
    mine = [row for row in rows if row.get("agent") == receiver]
    if not mine:
        return None
    if label == TWIN:
        prefix = f"exchange/{receiver}{TWIN_SUFFIX}->{receiver}/graft-twin"
        keys = {
            "moved": f"{prefix}/filled_prompts",
            "gated": f"{prefix}/gated_prompts",
            "resampled": f"{prefix}/resampled_responses",
        }
    else:
        keys = {"moved": f"exchange/{peer}->{receiver}/prompts"}
    return {
        name: float(np.mean([row.get(key, 0.0) for row in mine])) for name, key in keys.items()
    } | {"steps": len(mine)}


def moved_groups(study: Study) -> dict[str, Any]:
    """Per exchange arm: per (seed, receiver) the per-step means, and their summary; the
    twin's matched share (filled / gated over every step of every cell)."""
    models = sorted(study.gaps, key=lambda m: study.gaps[m].role)
    per_cell: dict[str, dict[str, dict[str, Any]]] = {GRAFT: {}, TWIN: {}, SHUFFLED: {}}
    for result in study.results:
        if result["label"] not in per_cell:
            continue
        rows = study.logs.get(result["cell"], [])
        for receiver in models:
            peer = next(m for m in models if m != receiver)
            found = receiver_means(rows, result["label"], receiver, peer)
            if found is not None:
                key = f"{result['seed']}/{receiver}"
                per_cell[result["label"]][key] = found | {"build": build_of(int(result["seed"]))}
    summary = {
        label: {
            name: float(np.mean([v[name] for v in cells.values()]))
            for name in ("moved", "gated", "resampled")
            if cells and all(name in v for v in cells.values())
        }
        for label, cells in per_cell.items()
    }
    twin = per_cell[TWIN].values()
    gated = sum(v["gated"] * v["steps"] for v in twin)
    matched = sum(v["moved"] * v["steps"] for v in twin) / gated if gated else None
    return {"per_cell": per_cell, "summary": summary, "twin_matched_share": matched}


def per_moved_group(study: Study, moved: Mapping[str, Any]) -> dict[str, Any]:
    """S4: per seed, pooled over models, (GRAFT - GRPO) / GRAFT's moved groups per step minus
    (twin - GRPO) / the twin's, with its t-interval and p; seeds lacking a cell, a log or a
    moved group are listed."""
    per_seed, left_out = {}, {}
    keys = [(label, model) for label in (GRAFT, TWIN, GRPO) for model in study.gaps]
    seeds = sorted(set.intersection(*(set(study.records.get(key, {})) for key in keys)))
    for seed in seeds:
        parts = []
        for model, gap in study.gaps.items():
            base = gap_score(study.records[(GRPO, model)][seed], gap.gap_set)
            ratio = []
            for label in (GRAFT, TWIN):
                found = moved["per_cell"][label].get(f"{seed}/{model}")
                if found is None or found["moved"] <= 0:
                    break
                gain = gap_score(study.records[(label, model)][seed], gap.gap_set) - base
                ratio.append(gain / found["moved"])
            if len(ratio) < 2:
                left_out[str(seed)] = f"{model}: no metrics log or no moved group"
                break
            parts.append(ratio[0] - ratio[1])
        else:
            per_seed[str(seed)] = {"value": float(np.mean(parts)), "build": build_of(int(seed))}
    values = [v["value"] for v in per_seed.values()]
    entry: dict[str, Any] = {"per_seed": per_seed, "left_out": left_out, "mean": None}
    if len(values) >= 2:
        low, high = t_interval(values)
        t, p = t_test(values)
        entry |= {"mean": float(np.mean(values)), "t_interval": {"low": low, "high": high}}
        entry |= {"t": t, "p": p}
    return entry
