"""Writers for evaluation results: JSON, CSV (one row per benchmark), markdown and JSONL samples.

Every file records what is needed to reproduce or distrust a number: the sampling config
and seeds, the package versions that produced it (torch, transformers, math-verify, ...),
the git commit of the code (and whether the tree had uncommitted changes) and timings.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import platform
import subprocess
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from graft_env.eval.results import BenchmarkResult, EvalResult, Sample
from graft_env.policies.base import FINISH_REASONS
from graft_env.policies.cache import kernel_provenance
from graft_env.rewards import STATUSES

PACKAGES = ("torch", "transformers", "math-verify", "numpy", "graft-rlvr")
REPO_ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    """Output of a read-only git command in the repository, or None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "--no-optional-locks", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def run_provenance() -> dict[str, Any]:
    """Package versions, git commit ("unknown" outside a checkout), the start time (UTC) and
    the machine's float kernels (`kernel_provenance`: a run's numbers, and a tiny pair's build,
    differ between CPUs whose kernel paths differ, e.g. AVX-512 and AVX2)."""
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "versions": versions,
        "git_commit": commit or "unknown",
        "git_dirty": None if changes is None else bool(changes),
        "machine": kernel_provenance(),
    }


def _benchmark_figures(
    name: str, bench: BenchmarkResult, summary: dict[str, float]
) -> dict[str, Any]:
    """The per-benchmark numbers that both the JSON and the CSV report carry."""
    return {
        "n_problems": len(bench.problem_ids),
        "pass@1": summary[f"{name}/pass@1"],
        "pass@1_std": summary[f"{name}/pass@1_std"],
        "pass@k": bench.pass_at_k,
        "all_fail": bench.all_fail_share,
        "generated_tokens": bench.generated_tokens,
        "generation_seconds": bench.generation_seconds,
        "verification_seconds": bench.verification_seconds,
    }


def result_dict(result: EvalResult) -> dict[str, Any]:
    """The whole result except the samples, as JSON-ready plain data."""
    summary = result.summary()
    benchmarks = {}
    for name, bench in result.benchmarks.items():
        benchmarks[name] = {
            **_benchmark_figures(name, bench, summary),
            "pass@1_per_repeat": bench.pass_at_1_per_repeat,
            "status_counts": bench.status_counts,
            "finish_reasons": bench.finish_reasons,
            "k": bench.k,
            "problem_ids": bench.problem_ids,
            "successes": bench.successes,
        }
    return {
        "policy": result.policy,
        "config": result.config,
        "provenance": result.provenance,
        "total_seconds": result.total_seconds,
        "summary": summary,
        "average": {
            "pass@1": summary["average/pass@1"],
            "pass@1_std": summary["average/pass@1_std"],
            "pass@1_per_repeat": result.average_per_repeat,
        },
        "benchmarks": benchmarks,
    }


def write_json(result: EvalResult, path: str | Path) -> None:
    Path(path).write_text(json.dumps(result_dict(result), indent=2, ensure_ascii=False) + "\n")


def csv_rows(result: EvalResult) -> list[dict[str, Any]]:
    """One row per benchmark, then an "average" row.

    In the average row the rates are unweighted means over the benchmarks (the headline)
    and the counts, tokens and seconds are totals. Run-level columns repeat on every row so
    a row read alone still says what produced it.
    """
    summary = result.summary()
    run_keys = ("k", "repeats", "seed", "temperature", "top_p", "max_new_tokens", "limit")
    run_columns = {
        "policy": result.policy,
        **{key: result.config[key] for key in run_keys},
        "git_commit": result.provenance["git_commit"],
        "git_dirty": result.provenance["git_dirty"],
        **{f"version_{name}": version for name, version in result.provenance["versions"].items()},
        "started_at": result.provenance["started_at"],
        "total_seconds": result.total_seconds,
    }
    rows = []
    for name, bench in result.benchmarks.items():
        rows.append(
            {
                "benchmark": name,
                **_benchmark_figures(name, bench, summary),
                **{f"status_{status}": bench.status_counts[status] for status in STATUSES},
                **{f"finish_{reason}": bench.finish_reasons[reason] for reason in FINISH_REASONS},
                **run_columns,
            }
        )
    average: dict[str, Any] = {"benchmark": "average"}
    for column in rows[0]:
        if column == "benchmark" or column in run_columns:
            continue
        if column in ("pass@1", "pass@1_std"):
            average[column] = summary[f"average/{column}"]
        elif column in ("pass@k", "all_fail"):
            average[column] = sum(row[column] for row in rows) / len(rows)
        else:
            average[column] = sum(row[column] for row in rows)
    rows.append({**average, **run_columns})
    return rows


def write_csv(result: EvalResult, path: str | Path) -> None:
    rows = csv_rows(result)
    with Path(path).open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(result: EvalResult) -> str:
    """A table (benchmark | n problems | pass@1 % mean ± std) and the run's settings."""
    summary = result.summary()
    config, provenance = result.config, result.provenance
    lines = [
        f"# Evaluation of {_cell(result.policy)}",
        "",
        "| benchmark | n problems | pass@1 (%, mean ± std) |",
        "|---|---:|---:|",
    ]
    for name, bench in result.benchmarks.items():
        mean, std = summary[f"{name}/pass@1"], summary[f"{name}/pass@1_std"]
        lines.append(
            f"| {_cell(name)} | {len(bench.problem_ids)} | {100 * mean:.2f} ± {100 * std:.2f} |"
        )
    total = sum(len(bench.problem_ids) for bench in result.benchmarks.values())
    mean, std = summary["average/pass@1"], summary["average/pass@1_std"]
    lines.append(f"| average | {total} | {100 * mean:.2f} ± {100 * std:.2f} |")
    statuses = {s: sum(b.status_counts[s] for b in result.benchmarks.values()) for s in STATUSES}
    finishes = {
        r: sum(b.finish_reasons[r] for b in result.benchmarks.values()) for r in FINISH_REASONS
    }
    tokens = sum(b.generated_tokens for b in result.benchmarks.values())
    generation_s = sum(b.generation_seconds for b in result.benchmarks.values())
    verification_s = sum(b.verification_seconds for b in result.benchmarks.values())
    versions = ", ".join(f"{name} {version}" for name, version in provenance["versions"].items())
    dirty = " (uncommitted changes)" if provenance["git_dirty"] else ""
    lines += [
        "",
        f"avg@{config['k']}: {config['k']} samples per problem, temperature "
        f"{config['temperature']}, top-p {config['top_p']}, at most {config['max_new_tokens']} "
        f"new tokens; {config['repeats']} repeat(s) with seeds {config['repeat_seeds']} "
        "(std over repeats, ddof 0); average = unweighted mean of the benchmarks.",
        f"Problems per set: {'first ' + str(config['limit']) if config['limit'] else 'all'}.",
        "Verifier statuses: " + ", ".join(f"{s} {n}" for s, n in statuses.items()) + ".",
        "Finish reasons: " + ", ".join(f"{r} {n}" for r, n in finishes.items()) + ".",
        f"Generated tokens: {tokens}; generation {generation_s:.1f} s, verification "
        f"{verification_s:.1f} s, total {result.total_seconds:.1f} s.",
        f"Code: commit {provenance['git_commit']}{dirty}; python {provenance['python']}, "
        f"{versions}; started {provenance['started_at']}.",
    ]
    return "\n".join(lines) + "\n"


def write_samples_jsonl(samples: Iterable[Sample], path: str | Path) -> int:
    """One JSON object per sample; returns how many were written."""
    count = 0
    with Path(path).open("w") as handle:
        for sample in samples:
            handle.write(json.dumps(dataclasses.asdict(sample), ensure_ascii=False) + "\n")
            count += 1
    return count
