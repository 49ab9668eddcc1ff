"""report.md of the peer-control study from its numbers (`controls_report.analyse`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.study.controls.design import ALPHA, BUILDS, CONTRASTS, EXCHANGE_ARMS


def _f(value: float | None, sign: bool = True) -> str:
    if value is None:
        return "–"
    return f"{value:+.1f}" if sign else f"{value:.1f}"


def _interval(found: Mapping[str, float] | None) -> str:
    return "–" if found is None else f"[{found['low']:+.1f}, {found['high']:+.1f}]"


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def contrast_table(entries: Sequence[Mapping[str, Any]], holm: bool) -> list[str]:
    head = (
        "| contrast | arm − baseline | scope | seeds | mean | t 95 % | bootstrap 95 % | sd | MDE "
        "| p |"
    )
    rule = "|---|---|---|---|---|---|---|---|---|---|"
    if holm:
        head, rule = head + " p (Holm) | verdict |", rule + "---|---|"
    lines = [head, rule]
    for e in entries:
        row = (
            f"| {e['contrast']} | {e['arm']} − {e['baseline']} | {e['scope']} | {len(e['seeds'])} "
            f"| {_f(e['mean'])} | {_interval(e['t_interval'])} | {_interval(e['bootstrap'])} "
            f"| {_f(e.get('sd'), False)} | {_f(e.get('mde'), False)} | {_p(e['p'])} |"
        )
        if holm:
            row += f" {_p(e.get('p_holm'))} | {e.get('verdict', e['not_run'] or '–')} |"
        lines.append(row)
    return lines


def per_seed_table(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    pooled = [e for e in entries if e["scope"] == "pooled"]
    seeds = sorted({s for e in pooled for s in e["per_seed"]}, key=int)
    lines = ["| seed | build | " + " | ".join(e["contrast"] for e in pooled) + " |"]
    lines.append("|---|---|" + "---|" * len(pooled))
    for seed in seeds:
        values = [e["per_seed"].get(seed) for e in pooled]
        build = next(v["build"] for v in values if v is not None)
        cells = " | ".join("–" if v is None else f"{v['value']:+.2f}" for v in values)
        lines.append(f"| {seed} | {build} | {cells} |")
    return lines


def dose_lines(doses: Mapping[str, Any]) -> list[str]:
    lines = [
        "| build | build seed | cache key | model | weights SHA-256 | gap family | dose: build "
        "report pass@1 (all-fail) | base at eval T: pass@1 | base strength |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, build in doses.items():
        prov = build["provenance"]
        for model, m in build["members"].items():
            sha = prov["members"][model]["weights_sha256"]
            dose = f"{_f(m['report_pass_at_1'], False)} ({_f(m['report_all_fail'], False)})"
            lines.append(
                f"| {name} | {build['build_seed']} | {prov['cache_key']} | {model} | {sha[:16]} "
                f"| {m['family']} | {dose} | {_f(m['base_eval_pass_at_1'], False)} "
                f"| {_f(m['base_eval_strength'], False)} |"
            )
    return lines


def moved_lines(moved: Mapping[str, Any], s4: Mapping[str, Any]) -> list[str]:
    lines = [
        "| arm | moved groups per receiver and step | twin: gated | twin: responses re-sampled |"
    ]
    lines.append("|---|---|---|---|")
    for label in EXCHANGE_ARMS:
        found = moved["summary"].get(label, {})
        lines.append(
            f"| {label} | {_f(found.get('moved'), False)} | {_f(found.get('gated'), False)} "
            f"| {_f(found.get('resampled'), False)} |"
        )
    share = moved["twin_matched_share"]
    shown = "–" if share is None else f"{100 * share:.1f} %"
    lines += ["", f"Twin's matched share (filled / gated, all steps): {shown}."]
    lines.append(
        f"S4, (GRAFT − GRPO) per GRAFT-moved group minus (twin − GRPO) per twin-moved group, "
        f"pooled, {len(s4['per_seed'])} seeds: {_f(s4['mean'])} points per group per step, "
        f"t 95 % {_interval(s4.get('t_interval'))}, p {_p(s4.get('p'))} (not Holm-adjusted)."
    )
    return lines


def per_build_lines(contrasts: Mapping[str, Any], builds: Sequence[Any], title: str) -> list[str]:
    """Each build's contrast table, then the builds' Welch difference under `title`."""
    lines: list[str] = []
    for build in builds:
        lines += [f"## {build.name} alone (seeds {build.seeds[0]}-{build.seeds[-1]})", ""]
        lines += [*contrast_table(contrasts["per_build"][build.name], False), ""]
    lines += [f"## {title} (Welch, per-seed pooled values)", ""]
    lines += ["| contrast | difference | 95 % | df |", "|---|---|---|---|"]
    for row in contrasts["build_difference"]:
        lines.append(
            f"| {row['contrast']} | {_f(row['difference'])} | {_interval(row)} | {row['df']:.1f} |"
        )
    return lines


def report_markdown(report: Mapping[str, Any]) -> str:
    """The whole report.md."""
    check, contrasts = report["registration"], report["contrasts"]
    pooled = contrasts["pooled_builds"]
    commit = check["design_commit"] or {}
    lines = [
        "# The gap study's peer controls: report (issue 39)",
        "",
        "Generated by `python -m benchmarks.study.controls_report`; every number and every "
        "per-seed value is in `results.json`. Design: docs/study/GAP-CONTROLS-PREREGISTRATION.md.",
        "",
        f"Cells finished: {report['cells']['finished']} of {report['cells']['planned']} "
        f"({report['cells']['missing']} missing, {report['cells']['stale']} stale).",
        "",
        "## Pre-registration check",
        "",
        f"Design files last committed in {commit.get('commit', '–')} at "
        f"{commit.get('committed_at', '–')}; first cell {check.get('first_cell', '–')} started "
        f"{check.get('first_cell_started_at', '–')}: **{check['verdict']}**"
        + (
            f" (started earlier: {', '.join(check['started_earlier'])})"
            if check["started_earlier"]
            else ""
        )
        + ".",
        "",
        "## Builds and dose (measured two ways)",
        "",
        "Dose, pre-registered: the build report's test split (T = 1.0, n = 8); beside it the "
        "base model's pass@1 at the evaluation temperature (T = 0.6, k = 16, 1,063 problems).",
        "",
        *dose_lines(report["doses"]),
        "",
        "## Primary contrasts (both builds, pooled over models)",
        "",
        f"t-interval primary, bootstrap beside it; p: two-sided one-sample t-test over the "
        f"per-seed values; Holm over C1-C3 at α = {ALPHA}; verdict: supported / reversed where "
        "the Holm-adjusted p < α, else not shown (not resolvable here where the MDE exceeds "
        "|mean|).",
        "",
        *contrast_table([e for e in pooled if e["primary"] and e["scope"] == "pooled"], True),
        "",
        "## Every contrast, both builds (secondary rows not adjusted)",
        "",
        *contrast_table(pooled, False),
        "",
        "## Per seed (pooled over models)",
        "",
        *per_seed_table(pooled),
        "",
    ]
    lines += per_build_lines(contrasts, BUILDS, "Build 0 − build 1")
    lines += ["", "## Groups moved per step", "", *moved_lines(report["moved"], report["s4"]), ""]
    lines += ["Predictions: " + "; ".join(f"{c.name} {c.prediction}" for c in CONTRASTS) + "."]
    return "\n".join(lines) + "\n"


def report_main(
    argv: Sequence[str] | None,
    description: str,
    default_out: str,
    analyse: Callable[[Path], Mapping[str, Any]],
    render: Callable[[Mapping[str, Any]], str],
) -> int:
    """A study report's command line: analyse the cells under --out once and write
    results.json and report.md to --report-dir (default <out>/report); a grid error is one
    line and exit status 2."""
    from benchmarks.compare.grid import GridError

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=Path(default_out))
    parser.add_argument("--report-dir", type=Path, default=None, help="default: <out>/report")
    args = parser.parse_args(argv)
    try:
        report = analyse(args.out)
    except GridError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    target = args.report_dir or args.out / "report"
    target.mkdir(parents=True, exist_ok=True)
    (target / "results.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    (target / "report.md").write_text(render(report))
    print(f"wrote {target / 'report.md'} and results.json")
    return 0
