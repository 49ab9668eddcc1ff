"""The study's curves, from each cell's metrics.jsonl: the periodic evaluation's learning
curves (mean ± std over seeds) and the exchange funnel per direction (per-step means over
seeds and totals).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.training.metrics import read_rows
from benchmarks.compare.plots import Curve, band
from benchmarks.compare.report import Record
from benchmarks.study.hypotheses import skill_sets

# summed over steps; `report_markdown.FUNNEL_COUNTS` gives each its README column
COUNTS = ("gate_candidates", "prompts", "transferred", "admitted")
Logs = Mapping[str, Sequence[Mapping[str, Any]]]  # cell id -> its run's metrics rows


def metrics_logs(runs: Path, results: Sequence[Mapping[str, Any]]) -> dict[str, list[dict]]:
    """Each cell's metrics log (none for a base cell, which does not train)."""
    logs = {}
    for result in results:
        path = runs / "cells" / result["cell"] / "run" / "metrics.jsonl"
        logs[result["cell"]] = [row for _, row in read_rows(path)] if path.is_file() else []
    return logs


def eval_series(
    rows: Sequence[Mapping[str, Any]], agent: str, sets: Sequence[str] | None
) -> dict[int, float]:
    """Updates completed -> periodic-evaluation pass@1 of `agent`: the average of all sets
    (`sets` None) or the mean over `sets`."""
    series = {}
    for row in rows:
        if row["agent"] == agent and "eval/average/pass@1" in row:
            values = [row[f"eval/{name}/pass@1"] for name in sets or ()]
            series[row["step"] + 1] = float(np.mean(values)) if sets else row["eval/average/pass@1"]
    return series


def learning_curves(
    results: Sequence[Mapping[str, Any]], logs: Logs, records: Sequence[Record], weak: bool
) -> dict[tuple[str, str], Curve]:
    """(model, label) -> mean ± std over seeds of the periodic evaluation (average of the
    sets, or of the model's weak skills)."""
    series: dict[tuple[str, str], list[dict[int, float]]] = defaultdict(list)
    for result in results:
        for agent in result["models"]:
            sets = skill_sets(records, agent)[0] if weak else None
            if weak and not sets:
                continue
            found = eval_series(logs[result["cell"]], agent, sets)
            if found:
                series[(agent, result["label"])].append(found)
    return {key: band(members) for key, members in series.items()}


def _direction_values(row: Mapping[str, Any]) -> tuple[str, dict[str, float]] | None:
    """(source, funnel values) of the direction `row`'s agent received in, if any."""
    pattern = re.compile(rf"exchange/(.+)->{re.escape(row['agent'])}/prompts")
    sources = [m.group(1) for key in row if (m := pattern.fullmatch(key))]
    if not sources:
        return None
    prefix = f"exchange/{sources[0]}->{row['agent']}"
    values = {
        "gate_candidates": row.get(f"{prefix}/gate_candidates", row[f"{prefix}/candidates"]),
        "prompts": row[f"{prefix}/prompts"],
        "transferred": row[f"{prefix}/transferred"],
        "admitted": row[f"{prefix}/admitted"],
    }
    if row.get("loss_fn/peer_tokens"):  # no peer token in the update: no share to clip
        values["clipped_share_peer"] = row["clipped_share_peer"]
    if row.get("exchange/s/count"):
        for name in ("count", "mean", "p10", "p90"):
            values[f"s_{name}"] = row[f"exchange/s/{name}"]
    return sources[0], values


def seed_mean(series: Sequence[Mapping[int, float]]) -> dict[str, list[float]]:
    """Per step: the mean over the seeds that have a value, and how many do."""
    steps = sorted(set().union(*series))
    present = [[s[step] for s in series if step in s] for step in steps]
    return {
        "step": steps,
        "mean": [float(np.mean(values)) for values in present],
        "seeds": [len(values) for values in present],
    }


def funnel(results: Sequence[Mapping[str, Any]], logs: Logs) -> dict[str, dict[str, Any]]:
    """label -> "S->R" -> per funnel quantity the per-step mean over seeds, and totals:
    per seed the sum over steps, then the mean over seeds (s: mean of every transferred
    response's s; clipped share: mean over the steps with peer tokens)."""
    per_seed: dict[tuple[str, str], list[dict[str, dict[int, float]]]] = defaultdict(list)
    for result in results:
        for agent in result["models"]:
            values: dict[str, dict[int, float]] = defaultdict(dict)
            source = None
            for row in logs[result["cell"]]:
                found = _direction_values(row) if row["agent"] == agent else None
                if found:
                    source = found[0]
                    for name, value in found[1].items():
                        values[name][row["step"]] = float(value)
            if source is not None:
                per_seed[(result["label"], f"{source}->{agent}")].append(values)
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for (label, direction), seeds in per_seed.items():
        names = sorted(set().union(*seeds))
        curves = {name: seed_mean([s[name] for s in seeds if name in s]) for name in names}
        totals = {name: float(np.mean([sum(s[name].values()) for s in seeds])) for name in COUNTS}
        totals["admitted_share"] = (
            totals["admitted"] / totals["transferred"] if totals["transferred"] else None
        )
        clipped = [v for s in seeds for v in s.get("clipped_share_peer", {}).values()]
        totals["clipped_share_peer"] = float(np.mean(clipped)) if clipped else None
        totals["mean_s"] = _pooled_s(seeds)
        out[label][direction] = {"seeds": len(seeds), "totals": totals, "curves": curves}
    return dict(out)


def _pooled_s(seeds: Sequence[Mapping[str, Mapping[int, float]]]) -> float | None:
    """Mean s over every scored response of every step and seed (each step's mean
    weighted by the responses it scored)."""
    weighted = [(s["s_mean"][t], s["s_count"][t]) for s in seeds for t in s.get("s_mean", {})]
    count = sum(n for _, n in weighted)
    return sum(m * n for m, n in weighted) / count if count else None
