"""The report of the pre-registered study (issue 16; docs/study/PREREGISTRATION.md).

    python -m benchmarks.study.report --grid configs/grids/study.yaml \\
        --runs runs/compare/study --out docs/results/study

Reads the grid's finished cells (`compare.finished_results`: a partly run grid gives a
partial report, and a hypothesis whose labels have no finished cell is listed as "not
run") and writes to --out:

- README.md (`report_markdown.render`): the paper-style table (per model and label: mean
  average pass@1 over seeds with a 95 % interval from a bootstrap over seeds and problems,
  Δ vs GRPO n=8 with its paired interval, weak-skill pass@1, rescue share, rollouts and
  wall time per cell), the per-skill table, each hypothesis per model (estimate, interval,
  verdict), the smallest difference the setup resolves (the half-width of H1's interval),
  the exchange funnel totals, and the plots;
- results.json: every number of the README and the plotted curves;
- learning_curves.png / learning_curves_weak.png: periodic-evaluation pass@1 (average of
  the sets / of the model's weak skills), one panel per family against GRPO n=8, one row
  per model, mean ± std over seeds;
- funnel.png: the exchange funnel over training of the cells that exchange, per
  direction (gate candidates, kept prompts, transferred and admitted responses, clipped
  peer-token share, s), mean over seeds.

The hypotheses are the pre-registered ones (`HYPOTHESES`); their labels are the study
grid's. The statistics are `benchmarks.study.stats`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.training.metrics import read_rows
from benchmarks.compare.cells import grid_models, plan_cells
from benchmarks.compare.grid import GridError, GridSpec, load_grid
from benchmarks.compare.plots import Curve, band
from benchmarks.compare.report import (
    Record,
    cell_records,
    compute_rows,
    provenance_summary,
    set_names,
    table_rows,
)
from benchmarks.compare.run import finished_results
from benchmarks.study.plots import plot_funnel, plot_learning
from benchmarks.study.report_markdown import render
from benchmarks.study.stats import label_interval, paired_contrast, paired_difference, verdict
from graft_env.policies.cache import kernel_provenance

GRPO8, GRPO32, GRAFT = "GRPO n=8", "GRPO n=32", "GRAFT"
NO_COMPAT, NO_FLOOR = "GRAFT w/o compat. weights", "GRAFT w/o floor"
NO_BALANCE, STORED = "GRAFT w/o balancing", "GRAFT stored"
NO_GAIN = "unresolved (no live gain to keep)"


@dataclass(frozen=True)
class Hypothesis:
    """A pre-registered claim: `labels` weights of a paired contrast that the claim says is
    > -margin (margin 0: superiority; > 0: non-inferiority by `margin` points)."""

    name: str
    claim: str
    labels: Mapping[str, float]
    margin: float = 0.0
    skills: bool = False  # sets weighted +1/|weak| on the weak skills, -1/|own| on the own


HYPOTHESES = (
    Hypothesis("H1", f"{GRAFT} > {GRPO8}", {GRAFT: 1.0, GRPO8: -1.0}),
    Hypothesis("H2", f"{GRAFT} >= {GRPO32} (margin 1 point)", {GRAFT: 1.0, GRPO32: -1.0}, 1.0),
    Hypothesis("H3", "compatibility weighting helps", {GRAFT: 1.0, NO_COMPAT: -1.0}),
    Hypothesis("H4", "the floor helps", {GRAFT: 1.0, NO_FLOOR: -1.0}),
    Hypothesis("H5", "balancing helps", {GRAFT: 1.0, NO_BALANCE: -1.0}),
    Hypothesis(
        "H6",
        "stored peers keep more than half of the live gain",
        {STORED: 1.0, GRAFT: -0.5, GRPO8: -0.5},
    ),
    Hypothesis(
        "H7",
        "the gain comes from the weak skills (weak minus own)",
        {GRAFT: 1.0, GRPO8: -1.0},
        skills=True,
    ),
)

# one panel per family, each against GRPO n=8; every label keeps its style in every figure
FAMILIES = {
    "budgets": (GRPO8, GRPO32),
    "GRAFT controls": (GRPO8, GRAFT, NO_COMPAT, NO_FLOOR, NO_BALANCE),
    "stored peer": (GRPO8, GRAFT, STORED),
}
STYLES = {  # colour, line style, marker (`study.plots.Style`)
    GRPO8: ("black", "-", "o"),
    GRPO32: ("tab:blue", "--", "s"),
    GRAFT: ("tab:red", "-", "^"),
    NO_COMPAT: ("tab:orange", "--", "v"),
    NO_FLOOR: ("tab:green", "-.", "D"),
    NO_BALANCE: ("tab:purple", ":", "P"),
    STORED: ("tab:brown", (0, (5, 1, 1, 1, 1, 1)), "X"),
}
# summed over steps; `report_markdown.FUNNEL_COUNTS` gives each its README column
COUNTS = ("gate_candidates", "prompts", "transferred", "admitted")


def skill_sets(records: Sequence[Record], model: str) -> tuple[list[str], list[str]]:
    """(weak, own) evaluation sets of `model`: its peer's own skills, and its own."""
    names = set_names(records)
    record = next(r for r in records if r["model"] == model)

    def sets(agent: str | None) -> list[str]:
        skills = record["own_skills"].get(agent or "", [])
        return [f"procedural/{s}" for s in skills if f"procedural/{s}" in names]

    return sets(record["peer"]), sets(model)


def _has(records: Sequence[Record], model: str, label: str) -> bool:
    return any(r["model"] == model and r["label"] == label for r in records)


def _find(rows: Sequence[Record], model: str, label: str) -> Record | None:
    return next((r for r in rows if r["model"] == model and r["label"] == label), None)


def assess(
    records: Sequence[Record], model: str, hypothesis: Hypothesis, **bootstrap: int
) -> dict[str, Any]:
    """One hypothesis for one model: its contrast, interval and verdict, or "not run"."""
    entry: dict[str, Any] = {
        "hypothesis": hypothesis.name,
        "claim": hypothesis.claim,
        "model": model,
        "labels": dict(hypothesis.labels),
        "margin": hypothesis.margin,
        "set_weights": None,
        "estimate": None,
        "verdict": "not run",
        "details": {},
    }
    missing = [label for label in hypothesis.labels if not _has(records, model, label)]
    if missing:
        entry["details"]["not_run"] = f"no finished cells of {', '.join(missing)}"
        return entry
    if hypothesis.skills:
        weak, own = skill_sets(records, model)
        if not weak or not own:
            entry["details"]["not_run"] = "the models' own skills are not known"
            return entry
        entry["set_weights"] = {
            **dict.fromkeys(weak, 1.0 / len(weak)),
            **dict.fromkeys(own, -1.0 / len(own)),
        }
    estimate = paired_contrast(records, model, hypothesis.labels, entry["set_weights"], **bootstrap)
    entry["estimate"] = asdict(estimate)
    entry["verdict"] = verdict(estimate, hypothesis.margin)
    return entry


def hypothesis_results(
    records: Sequence[Record],
    model: str,
    rows: Sequence[Record],
    compute: Sequence[Record],
    **bootstrap: int,
) -> list[dict[str, Any]]:
    """Every pre-registered hypothesis for `model`, with the numbers that go with it:
    H2 the rollout share, H6 the retention ratio (H6 is unresolved without H1's live
    gain), H7 the differences on weak and own skills alone and the rescue shares."""
    entries = {h.name: assess(records, model, h, **bootstrap) for h in HYPOTHESES}
    h1, h6, h7 = entries["H1"], entries["H6"], entries["H7"]
    graft_cost, grpo32_cost = _find(compute, model, GRAFT), _find(compute, model, GRPO32)
    if entries["H2"]["estimate"] and graft_cost and grpo32_cost:
        ours, theirs = graft_cost["rollouts_to_checkpoint"], grpo32_cost["rollouts_to_checkpoint"]
        entries["H2"]["details"]["rollout_share"] = ours / theirs if ours and theirs else None
    if h6["estimate"]:
        stored = _find(rows, model, STORED)["delta"]
        gain = h1["estimate"]["mean"]
        h6["details"]["retention"] = stored["mean"] / gain if gain else None
        if h1["verdict"] != "supported":
            h6["details"]["contrast_verdict"] = h6["verdict"]
            h6["verdict"] = NO_GAIN
    if h7["estimate"]:
        weak, own = skill_sets(records, model)
        for name, sets in (("weak", weak), ("own", own)):
            difference = paired_difference(records, model, GRAFT, GRPO8, sets=sets, **bootstrap)
            h7["details"][f"{name}_skills_delta"] = asdict(difference)
        for label in (GRAFT, GRPO8):
            h7["details"][f"rescue {label}"] = _find(rows, model, label)["rescue"]
    return list(entries.values())


def study_table(
    records: Sequence[Record], labels: Sequence[str], baseline: str, **bootstrap: int
) -> list[Record]:
    """`compare.report.table_rows` (per-set means, weak skills, rescue share) with each
    row's 95 % interval of the mean average pass@1 and its paired Δ vs `baseline`."""
    rows = table_rows(records, baseline, labels)
    for row in rows:
        model, label = row["model"], row["label"]
        row["interval"] = asdict(label_interval(records, model, label, **bootstrap))
        against = label != baseline and _has(records, model, baseline)
        delta = paired_difference(records, model, label, baseline, **bootstrap) if against else None
        row["delta"] = None if delta is None else asdict(delta)
    return rows


# ---- curves: the periodic evaluation and the exchange, from each cell's metrics.jsonl


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


# ---- the report


def analyse(
    grid: GridSpec, runs: str | Path, *, resamples: int = 10_000, seed: int = 0
) -> dict[str, Any]:
    """Every number of the report, from the grid's finished cells under `runs`."""
    runs = Path(runs)
    results = finished_results(grid, runs)
    logs = metrics_logs(runs, results)
    records = cell_records(results)
    labels = [entry.label for entry in grid.algorithms]
    bootstrap = {"resamples": resamples, "seed": seed}
    rows = study_table(records, labels, grid.baseline, **bootstrap)
    compute = compute_rows(records, labels)
    models = list(dict.fromkeys(row["model"] for row in rows))
    hypotheses = [
        entry
        for model in models
        for entry in hypothesis_results(records, model, rows, compute, **bootstrap)
    ]
    resolution = {
        e["model"]: (e["estimate"]["high"] - e["estimate"]["low"]) / 2 if e["estimate"] else None
        for e in hypotheses
        if e["hypothesis"] == "H1"
    }
    own = {model: skill_sets(records, model) for model in models}
    return {
        "grid": grid.name,
        "baseline": grid.baseline,
        "labels": labels,
        "sets": set_names(records),
        "skills": {m: {"weak": weak, "own": mine} for m, (weak, mine) in own.items()},
        "cells": {
            "finished": len(results),
            "planned": len(plan_cells(grid, runs)),
            "seconds": sum(r["timings"]["cell_seconds"] for r in results),
        },
        "bootstrap": bootstrap,
        "table": rows,
        "compute": compute,
        "hypotheses": hypotheses,
        "resolution": resolution,
        "learning_curves": {
            kind: [
                {"model": m, "label": label, **curve}
                for (m, label), curve in learning_curves(results, logs, records, weak).items()
            ]
            for kind, weak in (("average", False), ("weak_skills", True))
        },
        "funnel": funnel(results, logs),
        "provenance": {**provenance_summary(results), "build": build_provenance(grid)},
    }


def build_provenance(grid: GridSpec) -> dict[str, Any]:
    """What the numbers depend on beyond the code: this machine's CPU, kernel path and
    torch / oneDNN versions (the cells' and the build's, when they ran here), and each
    model's built weights (`model_identity`: cache key @ SHA-256; the cells' hashes
    hold it, so every finished cell trained these weights)."""
    return {"machine": kernel_provenance(), "weights": grid_models(grid)}


def write_report(report: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """README.md, results.json and the PNGs there is data for."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "README.md", out_dir / "results.json"]
    paths[0].write_text(render(report))
    paths[1].write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    models = list(report["skills"])
    titles = {
        "average": ("learning_curves.png", "Periodic evaluation: pass@1, average of the sets"),
        "weak_skills": ("learning_curves_weak.png", "Periodic evaluation: pass@1, weak skills"),
    }
    for kind, (name, title) in titles.items():
        curves = {(c["model"], c["label"]): c for c in report["learning_curves"][kind]}
        if curves:
            paths.append(plot_learning(curves, models, out_dir / name, title, FAMILIES, STYLES))
    if report["funnel"]:
        paths.append(plot_funnel(report["funnel"], out_dir / "funnel.png", STYLES, GRAFT))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", default="configs/grids/study.yaml", help="the study's grid")
    parser.add_argument(
        "--runs", default=None, help="the grid's output directory (default: runs/compare/<name>)"
    )
    parser.add_argument("--out", default="docs/results/study", help="report directory")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    parser.add_argument("--bootstrap-seed", type=int, default=0)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a grid field as graft compare does, e.g. --set seeds=[0,1,2,3] to "
        "analyse exactly the seeds whose cells all finished (the stopping rule)",
    )
    args = parser.parse_args(argv)
    try:
        grid = load_grid(args.grid, args.overrides)
        runs = Path(args.runs) if args.runs else Path("runs") / "compare" / grid.name
        report = analyse(grid, runs, resamples=args.resamples, seed=args.bootstrap_seed)
    except GridError as error:
        print(f"benchmarks.study.report: {error}", file=sys.stderr)
        return 2
    paths = write_report(report, args.out)
    for entry in report["hypotheses"]:
        print(f"{entry['hypothesis']} {entry['model']}: {entry['verdict']}")
    print("written: " + ", ".join(str(path) for path in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
