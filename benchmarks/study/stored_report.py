"""The stored-peer study at gap-d30 (docs/study/STORED-PEER-PREREGISTRATION.md).

    python -m benchmarks.study.stored_report --out runs/gap-stored-peers \\
        --report-dir docs/results/gap-stored-peers/report

Reads each build's cells under <out>/<build> (build2: configs/grids/gap-stored-peers.yaml,
seeds 40-51; build3: gap-stored-peers-b3.yaml, seeds 52-63), planned by the grids' own hashes,
with the peer-control study's analysis (`controls.numbers`: per-seed paired differences of
pooled gap scores, t-interval primary, the two-level paired bootstrap beside it, Holm over
the primary contrasts, per build and per model, build difference by Welch) on this study's
builds and contrasts: P1 GRAFT stored − GRPO n=8 and P2 GRAFT library − GRPO n=8 (primary),
N1 GRAFT stored − GRAFT (non-inferiority by `MARGIN`), S1 GRAFT − GRPO n=8 and S2 GRAFT
library − GRAFT stored. Beside them: the doses, the pre-registration check, the transfers per
step of each exchange arm (`curves.funnel`), the library's lookups (`library_report`), the
s and w distributions of what each arm transferred, and the share of the live gain kept
against the paper's +1.8 of +2.1 points. Writes results.json and report.md.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.study.controls.design import Build, Contrast
from benchmarks.study.controls.markdown import (
    contrast_table,
    dose_lines,
    per_build_lines,
    per_seed_table,
    report_main,
)
from benchmarks.study.controls.numbers import all_contrasts, doses, merged, read_builds
from benchmarks.study.controls.timing import cell_starts, design_commit, registration_check
from benchmarks.study.curves import COUNTS, Logs, funnel
from benchmarks.study.library_report import LOOKUP, lookup_counts

REPO = Path(__file__).resolve().parents[2]
GRPO, LIVE, STORED, LIBRARY = "GRPO n=8", "GRAFT", "GRAFT stored", "GRAFT library"
EXCHANGE_ARMS = (LIVE, STORED, LIBRARY)
MARGIN = 1.0  # points: stored may trail live GRAFT by this much (N1, fixed in advance)
PAPER = {"live": 2.1, "stored": 1.8}  # the paper's gains over GRPO, points
BUILDS = (
    Build("build2", "configs/grids/gap-stored-peers.yaml", 2, tuple(range(40, 52))),
    Build("build3", "configs/grids/gap-stored-peers-b3.yaml", 3, tuple(range(52, 64))),
)
CONTRASTS = (
    Contrast("P1", STORED, GRPO, True, "> 0: the peer's stored live-GRAFT groups keep a gain"),
    Contrast("P2", LIBRARY, GRPO, True, "> 0: a library of the peer's GRPO runs keeps a gain"),
    Contrast("N1", STORED, LIVE, False, f"> -{MARGIN:g}: stored keeps live GRAFT's gain", MARGIN),
    Contrast("S1", LIVE, GRPO, False, "> 0: the live gain replicates on two new builds"),
    Contrast("S2", LIBRARY, STORED, False, "what a library gives against step-aligned replay"),
)
DESIGN_FILES = (
    "docs/study/STORED-PEER-PREREGISTRATION.md",
    "configs/grids/gap-stored-peers.yaml",
    "configs/grids/gap-stored-peers-b3.yaml",
    "configs/grids/gap.yaml",
    "configs/gap_pair_graft.yaml",
    "benchmarks/study/stored_report.py",
    "benchmarks/study/controls/numbers.py",
    "benchmarks/study/gap/contrasts.py",
    "benchmarks/study/multiplicity.py",
)
"""The study's design and the analysis it runs: the registration commit is the last commit
that touched any of these (the builds' files come later, before any cell, and the grids'
`build:` with them, which the check therefore counts too)."""
QUANTILES = ("p10", "p50", "p90")


def informativeness(results: Sequence[Mapping[str, Any]], logs: Logs) -> dict[str, Any]:
    """Per exchange arm and receiver: s and w of every transferred response (the loop's
    `exchange/s/*`, `exchange/w/*` per step): their mean over all responses (each step's mean
    weighted by its count) and the per-step quantiles averaged over the steps with any."""
    rows: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for result in results:
        if result["label"] in EXCHANGE_ARMS:
            for agent in result["models"]:
                mine = [r for r in logs.get(result["cell"], []) if r.get("agent") == agent]
                rows[(result["label"], agent)] += mine
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for (label, agent), found in sorted(rows.items()):
        entry = {}
        for name in ("s", "w"):
            steps = [r for r in found if r.get(f"exchange/{name}/count")]
            counts = np.array([r[f"exchange/{name}/count"] for r in steps])
            means = np.array([r[f"exchange/{name}/mean"] for r in steps])
            entry[name] = {
                "responses": float(counts.sum()),
                "steps": len(steps),
                "mean": float((counts * means).sum() / counts.sum()) if steps else None,
                **{
                    q: float(np.mean([r[f"exchange/{name}/{q}"] for r in steps])) if steps else None
                    for q in QUANTILES
                },
            }
        out[label][agent] = entry
    return dict(out)


def transfers(results: Sequence[Mapping[str, Any]], logs: Logs) -> dict[str, Any]:
    """Per exchange arm and direction: gate candidates, prompts, responses and admitted
    responses per step (`curves.funnel`'s run totals, mean over seeds, / the run's steps)."""
    steps = next((r["config"]["steps"] for r in results if r["config"]), None)
    found = funnel(results, logs)
    out: dict[str, dict[str, Any]] = {}
    for label in EXCHANGE_ARMS:
        for direction, data in found.get(label, {}).items():
            totals = data["totals"]
            per_step = {k: totals[k] / steps for k in COUNTS}
            out.setdefault(label, {})[direction] = {
                "seeds": data["seeds"],
                "per_step": per_step,
                "admitted_share": totals["admitted_share"],
                "mean_s": totals["mean_s"],
            }
    return out


def kept_share(contrasts: Mapping[str, Any]) -> dict[str, Any]:
    """Against the paper's +1.8 of +2.1: each stored arm's pooled mean gain over GRPO as a
    share of the live one (S1), descriptive (a ratio of two estimates, no interval)."""
    pooled = {e["contrast"]: e for e in contrasts["pooled_builds"] if e["scope"] == "pooled"}
    live = pooled["S1"]["mean"]
    shares = {
        arm: None if pooled[name]["mean"] is None or not live else pooled[name]["mean"] / live
        for arm, name in (("stored", "P1"), ("library", "P2"))
    }
    return {"paper": PAPER, "paper_share": PAPER["stored"] / PAPER["live"], "live": live} | {
        "shares": shares
    }


def analyse(out: Path, repo: Path = REPO) -> dict[str, Any]:
    """Every number of the report, from the cells under `out`."""
    studies = read_builds(out, BUILDS, root=repo)
    pooled = merged([study for _, _, _, study in studies])
    cells = [cells for _, _, cells, _ in studies]
    contrasts = all_contrasts(studies, pooled, CONTRASTS, BUILDS)
    trained = pooled.results
    return {
        "cells": {
            "planned": sum(len(c.planned) for c in cells),
            "finished": sum(len(c.results) for c in cells),
            "stale": sum(len(c.stale) for c in cells),
            "missing": sum(len(c.missing) for c in cells),
            "stale_cells": [cell for c in cells for cell in c.stale],
        },
        "registration": registration_check(design_commit(repo, DESIGN_FILES), cell_starts(trained)),
        "doses": doses(studies),
        "contrasts": contrasts,
        "kept": kept_share(contrasts),
        "transfers": transfers(trained, pooled.logs),
        "lookup": lookup_counts(trained, pooled.logs, LIBRARY),
        "informativeness": informativeness(trained, pooled.logs),
        "wall_seconds": {r["cell"]: r.get("timings", {}).get("cell_seconds") for r in trained},
    }


def _f(value: float | None, form: str = "{:.2f}") -> str:
    return "–" if value is None else form.format(value)


def report_markdown(report: Mapping[str, Any]) -> str:
    """The whole report.md."""
    check, contrasts = report["registration"], report["contrasts"]
    pooled = contrasts["pooled_builds"]
    commit = check["design_commit"] or {}
    kept = report["kept"]
    lines = [
        "# Do stored peers keep the gap-d30 gain? Report",
        "",
        "Generated by `python -m benchmarks.study.stored_report`; every number is in "
        "`results.json`. Design: docs/study/STORED-PEER-PREREGISTRATION.md.",
        "",
        f"Cells finished: {report['cells']['finished']} of {report['cells']['planned']} "
        f"({report['cells']['missing']} missing, {report['cells']['stale']} stale). "
        f"Pre-registration check: design files last committed in {commit.get('commit', '–')} "
        f"at {commit.get('committed_at', '–')}; first cell started "
        f"{check.get('first_cell_started_at', '–')}: **{check['verdict']}**.",
        "",
        "## Builds and dose",
        "",
        *dose_lines(report["doses"]),
        "",
        "## Primary contrasts (both builds, pooled over models; Holm over P1, P2)",
        "",
        *contrast_table([e for e in pooled if e["primary"] and e["scope"] == "pooled"], True),
        "",
        "## Every contrast, both builds (secondary rows not adjusted)",
        "",
        *contrast_table(pooled, False),
        "",
    ]
    for e in pooled:
        if e.get("margin") and e["scope"] == "pooled":
            v = e["margin_verdicts"]
            lines.append(
                f"{e['contrast']} non-inferiority at −{e['margin']:g} point: t-interval "
                f"**{v['t']}**, bootstrap {v['bootstrap']}."
            )
    lines += [
        "",
        f"Against the paper (stored keeps +{PAPER['stored']} of +{PAPER['live']} points, "
        f"{100 * kept['paper_share']:.0f} %): live GRAFT − GRPO here {_f(kept['live'], '{:+.2f}')}"
        f"; stored keeps {_f(kept['shares']['stored'], '{:.0%}')} of it, the library "
        f"{_f(kept['shares']['library'], '{:.0%}')} (ratios of pooled means, no interval).",
        "",
        "## Per seed (pooled over models)",
        "",
        *per_seed_table(pooled),
        "",
    ]
    lines += per_build_lines(contrasts, BUILDS, "First build − second")
    lines += ["", "## Transfers per step", ""]
    lines += ["| arm | direction | seeds | gate candidates | prompts | responses | admitted |"]
    lines += ["|---|---|---:|---:|---:|---:|---:|"]
    for label, directions in report["transfers"].items():
        for direction, t in directions.items():
            counts = " | ".join(_f(v) for v in t["per_step"].values())
            lines.append(f"| {label} | {direction} | {t['seeds']} | {counts} |")
    lines += ["", "Library lookups per step (mean over steps and seeds):", ""]
    lines += ["| receiver | " + " | ".join(LOOKUP) + " |", "|---|" + "---:|" * len(LOOKUP)]
    for agent, data in report["lookup"].items():
        lines.append(f"| {agent} | {' | '.join(_f(data['per_step'][n]) for n in LOOKUP)} |")
    lines += ["", "## Are the replayed groups as informative? s and w of transferred responses"]
    lines += ["", "| arm | receiver | responses | s mean | s p10 / p50 / p90 | w mean "]
    lines[-1] += "| w p10 / p50 / p90 |"
    lines += ["|---|---|---:|---:|---|---:|---|"]
    for label, agents in report["informativeness"].items():
        for agent, e in agents.items():
            s, w = e["s"], e["w"]
            lines.append(
                f"| {label} | {agent} | {w['responses']:.0f} | {_f(s['mean'])} | "
                f"{' / '.join(_f(s[q]) for q in QUANTILES)} | {_f(w['mean'])} | "
                f"{' / '.join(_f(w[q]) for q in QUANTILES)} |"
            )
    lines += ["", "Predictions: " + "; ".join(f"{c.name} {c.prediction}" for c in CONTRASTS) + "."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    description = __doc__.split("\n\n")[0]
    return report_main(argv, description, "runs/gap-stored-peers", analyse, report_markdown)


if __name__ == "__main__":
    sys.exit(main())
