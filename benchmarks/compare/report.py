"""The comparison reports: the paper-style table, the compute table and the curves' data.

Input is the list of cell results `benchmarks.compare.run.run_grid` returns (or the cells'
``result.json`` files); `cell_records` flattens them into one record per (cell, updated
model), and every table and curve is computed from those records, so the arithmetic can
be checked on hand-made records.

- Table (GRAFT-SPEC §12 layout): one row per updated model (with its peer) and algorithm
  label; columns: pass@1 of each evaluation set and their unweighted average, as mean ±
  std over seeds (sample std, ddof = 1; one seed: std 0), and Δ of the average vs the
  baseline label of the same model. Where the models' own skills are known (the tiny
  pair): pass@1 on the model's weak skills (the peer's own skills) and the rescue share:
  of the model's all-fail evaluation problems (no correct sample in k x repeats), the
  share its peer's model, trained the same way with the same seed, solves at least once.
- Compute table: steps, rollouts generated and training seconds up to the evaluated
  checkpoint (best or final), per cell, mean over seeds.
The curves (learning, complementarity) are in `benchmarks.compare.plots`.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graft_env.eval.report import run_provenance

Record = dict[str, Any]
Key = tuple[str, str, str]  # (model, pair id, label): one table row


def cell_records(results: Iterable[Mapping[str, Any]]) -> list[Record]:
    """One record per updated model of every cell result."""
    records = []
    for result in results:
        pair = list(result["pair"])
        cell_rollouts = [m.get("rollouts_to_checkpoint") for m in result["models"].values()]
        for agent, model in result["models"].items():
            evaluation = model["eval"]["benchmarks"]
            records.append(
                {
                    "label": result["label"],
                    "model": agent,
                    "pair": pair,
                    "peer": next((a for a in pair if a != agent), None),
                    "seed": result["seed"],
                    "own_skills": result.get("own_skills", {}),
                    "sets": {name: b["pass@1"] for name, b in evaluation.items()},
                    "average": model["eval"]["average"]["pass@1"],
                    "problems": {
                        name: dict(
                            zip(
                                b["problem_ids"],
                                np.sum(b["successes"], axis=0).tolist(),
                                strict=True,
                            )
                        )
                        for name, b in evaluation.items()
                    },
                    "samples": {  # per problem; None in results written before k was stored
                        name: b["k"] * len(b["successes"]) if "k" in b else None
                        for name, b in evaluation.items()
                    },
                    "checkpoint_steps": model.get("checkpoint_steps"),
                    "rollouts_to_checkpoint": model.get("rollouts_to_checkpoint"),
                    "cell_rollouts_to_checkpoint": None
                    if None in cell_rollouts
                    else sum(cell_rollouts),
                    "train_seconds_to_checkpoint": model.get("train_seconds_to_checkpoint"),
                    "cell_seconds": result["timings"]["cell_seconds"],
                    "curves": model.get("curves"),
                    "train_counts": model.get("train_counts"),
                }
            )
    return records


def seed_stats(values: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """(mean, sample std, count) of the values that are not None; (None, None, 0) if none."""
    present = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if present.size == 0:
        return None, None, 0
    std = float(present.std(ddof=1)) if present.size > 1 else 0.0
    return float(present.mean()), std, int(present.size)


def _key(record: Record) -> Key:
    return record["model"], "+".join(record["pair"]), record["label"]


def peer_record(record: Record, records: Sequence[Record]) -> Record | None:
    """The peer's record of the same label, pair and seed (trained the same way)."""
    for other in records:
        same = other["label"] == record["label"] and other["pair"] == record["pair"]
        if same and other["seed"] == record["seed"] and other["model"] == record["peer"]:
            return other
    return None


def rescue_share(record: Record, peer: Record) -> float | None:
    """Of `record`'s all-fail evaluation problems, the share `peer` solves at least once."""
    failed = rescued = 0
    for name, counts in record["problems"].items():
        theirs = peer["problems"].get(name, {})
        for problem, successes in counts.items():
            if successes == 0 and problem in theirs:
                failed += 1
                rescued += int(theirs[problem] > 0)
    return rescued / failed if failed else None


def weak_skill_pass(record: Record) -> float | None:
    """Mean pass@1 over the `procedural/<skill>` sets of the peer's own skills."""
    skills = record["own_skills"].get(record["peer"] or "", [])
    values = [
        record["sets"][f"procedural/{s}"] for s in skills if f"procedural/{s}" in record["sets"]
    ]
    return float(np.mean(values)) if values else None


def grouped(records: Sequence[Record]) -> dict[Key, list[Record]]:
    groups: dict[Key, list[Record]] = defaultdict(list)
    for record in records:
        groups[_key(record)].append(record)
    return groups


def _row_order(groups: Mapping[Key, list[Record]], labels: Sequence[str]) -> list[Key]:
    """Rows per model (first appearance order), then labels in `labels` order."""
    models = list(dict.fromkeys((model, pair) for model, pair, _ in groups))
    rank = {label: index for index, label in enumerate(labels)}
    return [
        key
        for model in models
        for key in sorted(
            (k for k in groups if k[:2] == model), key=lambda k: rank.get(k[2], len(rank))
        )
    ]


def set_names(records: Sequence[Record]) -> list[str]:
    """The evaluation sets, in the order the records list them."""
    return list(dict.fromkeys(name for record in records for name in record["sets"]))


def table_rows(
    records: Sequence[Record], baseline: str, labels: Sequence[str] = ()
) -> list[Record]:
    """The paper-style table, one dict per (model, pair, label), in row order: per model,
    `base` first, then `labels` order. Numbers are fractions; None where not measured.

    For each column C (each set, "average", "weak_skills", "rescue"): C, C_std, C_n (seeds
    with a value); for the sets and the average also C_delta, the difference of means from
    the baseline row of the same model and pair.
    """
    groups = grouped(records)
    names = set_names(records)
    rows = []
    for key in _row_order(groups, ["base", *labels]):
        members = groups[key]
        model, pair, label = key
        row: Record = {"model": model, "peer": members[0]["peer"], "pair": pair, "label": label}
        row["seeds"] = [r["seed"] for r in members]
        columns = {name: [r["sets"].get(name) for r in members] for name in names}
        columns["average"] = [r["average"] for r in members]
        columns["weak_skills"] = [weak_skill_pass(r) for r in members]
        peers = [(r, peer_record(r, records)) for r in members]
        columns["rescue"] = [rescue_share(r, p) if p else None for r, p in peers]
        for name, values in columns.items():
            row[name], row[f"{name}_std"], row[f"{name}_n"] = seed_stats(values)
        rows.append(row)
    for row in rows:
        base = next(
            (
                r
                for r in rows
                if r["label"] == baseline
                and r["model"] == row["model"]
                and r["pair"] == row["pair"]
            ),
            None,
        )
        for name in [*names, "average"]:
            ok = base is not None and base[name] is not None and row[name] is not None
            row[f"{name}_delta"] = row[name] - base[name] if ok else None
    return rows


def compute_rows(records: Sequence[Record], labels: Sequence[str] = ()) -> list[Record]:
    """Per trained (model, pair, label): means over seeds of steps, rollouts and seconds
    up to the evaluated checkpoint, and of the whole cell's wall time."""
    groups = grouped([r for r in records if r["checkpoint_steps"] is not None])
    rows = []
    for key in _row_order(groups, labels):
        model, pair, label = key
        row: Record = {"model": model, "pair": pair, "label": label, "seeds": len(groups[key])}
        for name in COMPUTE_COLUMNS:
            row[name] = seed_stats([r[name] for r in groups[key]])[0]
        rows.append(row)
    return rows


def _pct(mean: float | None, std: float | None = None) -> str:
    if mean is None:
        return "–"
    return f"{100 * mean:.1f}" + ("" if std is None else f" ± {100 * std:.1f}")


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.1f}"


COMPUTE_COLUMNS = {
    "checkpoint_steps": "steps to checkpoint",
    "rollouts_to_checkpoint": "rollouts (model)",
    "cell_rollouts_to_checkpoint": "rollouts (cell)",
    "train_seconds_to_checkpoint": "train s to checkpoint",
    "cell_seconds": "cell s",
}
EXTRA_COLUMNS = {"weak_skills": "weak skills", "rescue": "rescue share"}


def render_markdown(
    rows: Sequence[Record], names: Sequence[str], compute: Sequence[Record], baseline: str
) -> str:
    """Both tables as markdown, each with a note saying what its numbers are."""
    extras = [c for c in EXTRA_COLUMNS if any(row[c] is not None for row in rows)]
    header = ["updated model (peer)", "algorithm", "seeds", *names, "average"]
    header += [f"Δ avg vs {baseline}", *(EXTRA_COLUMNS[c] for c in extras)]
    lines = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for row in rows:
        cells = [f"{row['model']} ({row['peer']})", row["label"], str(row["average_n"])]
        cells += [_pct(row[name], row[f"{name}_std"]) for name in [*names, "average"]]
        cells += [_signed(row["average_delta"])]
        cells += [_pct(row[c], row[f"{c}_std"]) for c in extras]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "pass@1 in %, mean ± std over seeds (sample std; one seed: ± 0.0). Δ: difference "
        f"of the mean average from {baseline} of the same model. Weak skills: pass@1 on "
        "the peer's own skills. Rescue share: of the model's all-fail evaluation problems, "
        "the share the peer's model (trained the same way, same seed) solves at least once.",
    ]
    if compute:
        header = ["updated model", "algorithm", "seeds", *COMPUTE_COLUMNS.values()]
        lines += ["", "| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
        for row in compute:
            values = ["–" if row[c] is None else f"{row[c]:.0f}" for c in COMPUTE_COLUMNS]
            lines.append(
                f"| {row['model']} | {row['label']} | {row['seeds']} | " + " | ".join(values) + " |"
            )
        lines += [
            "",
            "Compute: means over seeds, up to the evaluated checkpoint (best or final). A "
            "cell of an exchange algorithm trains both models: its rollouts and seconds "
            "cover both. Train s: rollout, verify, exchange and update phases, without "
            "periodic evaluation; cell s: the cell's wall time, evaluations included.",
        ]
    return "\n".join(lines) + "\n"


def _write_csv(path: Path, rows: Sequence[Record]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()}
            )


def provenance_summary(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """This report's provenance (`machine`: where the report ran), plus every distinct code
    version and float-kernel path (CPU, torch's CPU capability) the cells ran with; cells
    from before results recorded their machine count as "not recorded"."""
    versions = {(r["provenance"]["git_commit"], r["provenance"]["git_dirty"]) for r in results}
    return {
        **run_provenance(),
        "cells": len(results),
        "cell_commits": [{"git_commit": c, "git_dirty": d} for c, d in sorted(versions, key=str)],
        "cell_kernels": sorted({_kernels(r["provenance"]) for r in results}),
    }


def _kernels(provenance: Mapping[str, Any]) -> str:
    """A cell's CPU and torch kernel path, e.g. "AMD EPYC (AVX2)", or "not recorded"."""
    machine = provenance.get("machine")
    if machine is None:
        return "not recorded"
    return f"{machine.get('cpu')} ({machine.get('torch_cpu_capability')})"


def write_reports(
    results: Sequence[Mapping[str, Any]],
    out_dir: str | Path,
    baseline: str,
    labels: Sequence[str] = (),
) -> list[Path]:
    """table.md (both tables), table.csv, compute.csv and table.json (rows, compute, provenance)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = cell_records(results)
    names = set_names(records)
    rows = table_rows(records, baseline, labels)
    compute = compute_rows(records, labels)
    paths = [out_dir / "table.md", out_dir / "table.csv", out_dir / "table.json"]
    paths[0].write_text(render_markdown(rows, names, compute, baseline))
    _write_csv(paths[1], rows)
    document = {
        "baseline": baseline,
        "sets": names,
        "rows": rows,
        "compute": compute,
        "provenance": provenance_summary(results),
    }
    paths[2].write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
    if compute:
        paths.append(out_dir / "compute.csv")
        _write_csv(paths[-1], compute)
    return paths
