"""`worker_group_device_check`'s stage runner and its files: each stage timed, its peak memory
beside the plan's, skipped with the rest where it would end past the time budget, and
results.json and summary.txt written before and after every stage.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from typing import Any

from algorithms.training.memory_plan import GIB


class Stages:
    """Runs the stages, timing each and recording its peak memory beside the plan; a stage
    whose expected seconds would end past `--time-budget-s` is skipped (with the rest)."""

    def __init__(
        self, args: argparse.Namespace, results: dict, expected: dict[str, float] | None = None
    ) -> None:
        self.args, self.results = args, results
        self.expected = expected or {}
        self.started = time.perf_counter()

    def write(self) -> None:
        """results.json and summary.txt as they stand (before and after every stage)."""
        out = self.args.out
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / "results.json").write_text(json.dumps(self.results, indent=2))
            (out / "summary.txt").write_text("\n".join(summary_lines(self.results)) + "\n")

    def run(self, name: str, fn: Callable[[], dict], plan_bytes: float | None = None) -> dict:
        from benchmarks.perf.common import synchronize
        from benchmarks.perf.random_models import peak_bytes, reset_peak

        device, budget = self.args.device, self.args.time_budget_s
        elapsed, expected = time.perf_counter() - self.started, self.expected.get(name, 0.0)
        if self.results.get("skipped") or elapsed + expected > budget:  # keep what ran
            record = {
                "skipped": f"{elapsed:.0f} s + expected {expected:.0f} s > --time-budget-s "
                f"{budget:g}",
                "peak_gib": math.nan,
            }
            self.results.setdefault("skipped", []).append(name)
            self.results["stages"][name] = record
            self.write()
            return record
        print(f"[{name}]", flush=True)
        self.results["stages"][name] = {"running_since_s": elapsed, "peak_gib": math.nan}
        self.write()  # a run killed in this stage still leaves what ran before it
        if device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
        reset_peak(device)
        started = time.perf_counter()
        try:
            record = fn()
            synchronize(device)
            record["seconds"] = time.perf_counter() - started
        except Exception as err:  # record it; the later stages still tell something
            record = {"error": f"{type(err).__name__}: {err}"}
            self.results.setdefault("errors", []).append(f"{name}: {record['error']}")
            print(f"ERROR {name}: {record['error']}", flush=True)
        record["peak_gib"] = peak_bytes(device) / GIB
        if plan_bytes is not None:
            record["plan_gib"] = plan_bytes / GIB
            record["plan_over_measured"] = plan_bytes / max(peak_bytes(device), 1)
        self.results["stages"][name] = record
        self.write()
        return record


def summary_lines(results: dict) -> list[str]:
    settings = results["settings"]
    lines = [
        f"{settings['model']}: {settings['parameters']:,} parameters, "
        f"{results['environment']['device']}, torch {results['environment']['torch']}, "
        f"transformers {results['environment']['transformers']}, driver {settings['driver']}",
        f"{'stage':<14}{'seconds':>9}{'peak GiB':>10}{'plan GiB':>10}{'plan/meas':>10}  notes",
    ]
    for name, r in results["stages"].items():
        notes = {
            k: v
            for k, v in r.items()
            if k not in ("seconds", "peak_gib", "plan_gib", "plan_over_measured", "path")
        }
        plan = f"{r['plan_gib']:>10.2f}{r['plan_over_measured']:>10.2f}" if "plan_gib" in r else ""
        shown = ", ".join(f"{k} {_fmt(v)}" for k, v in notes.items())
        lines.append(
            f"{name:<14}{r.get('seconds', math.nan):>9.2f}{r['peak_gib']:>10.2f}{plan:<20}  {shown}"
        )
    cuda = results["stages"].get("checkpoint", {}).get("cuda_rng_equal_after_load")
    if cuda is False:
        lines.append(
            "FINDING: load does not restore the CUDA RNG: sharded_checkpoint saves "
            "torch.get_rng_state() (the CPU generator) only, so CUDA draws after a resume "
            "do not continue the saved stream"
        )
    elif cuda is True:
        lines.append("CUDA RNG equal after load")
    for error in results.get("errors", []):
        lines.append(f"ERROR {error}")
    if results.get("skipped"):
        lines.append(f"SKIPPED (time budget): {', '.join(results['skipped'])}")
    return lines


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
