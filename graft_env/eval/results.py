"""What one evaluation measured (GRAFT-SPEC §10): every sample, per-problem success counts
per repeat, and the rates derived from them. Plain data: `graft_env.eval.evaluate` fills
it, `graft_env.eval.report` writes it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Sample:
    """One generated response and how it was scored; `reward` is 1.0 only if verified correct."""

    benchmark: str
    problem_id: str
    repeat: int
    sample_index: int
    text: str
    gold: str
    extracted: str | None
    reward: float
    status: str
    finish_reason: str
    num_tokens: int


@dataclass(frozen=True)
class BenchmarkResult:
    """One benchmark's outcome over all repeats.

    `successes[r][i]` is how many of the k samples of problem `problem_ids[i]` were correct
    in repeat r. Counts (statuses, finish reasons, tokens) and seconds cover all repeats
    (in a partial result: every verified sample); verification runs while the next batch
    generates, so the two seconds overlap. `skipped` are the problems whose prompt left no
    room for a response in the model's positions: in no count and no rate.
    """

    name: str
    k: int
    problem_ids: list[str]
    successes: list[list[int]]
    status_counts: dict[str, int]
    finish_reasons: dict[str, int]
    generated_tokens: int
    generation_seconds: float
    verification_seconds: float
    skipped: list[str] = field(default_factory=list)

    def _rates(self) -> np.ndarray:
        return np.asarray(self.successes, dtype=np.float64) / self.k

    @property
    def pass_at_1_per_repeat(self) -> list[float]:
        """avg@k for each repeat: mean over problems of (correct samples / k)."""
        return self._rates().mean(axis=1).tolist()

    @property
    def pass_at_k(self) -> float:
        """Share of problems with at least one correct sample, mean over repeats."""
        return float((self._rates() > 0).mean())

    @property
    def all_fail_share(self) -> float:
        """Share of problems where all k samples failed, mean over repeats."""
        return float((self._rates() == 0).mean())


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population std (ddof=0) of the repeats: a single repeat has std 0 by definition."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std())


@dataclass(frozen=True)
class EvalResult:
    """Everything one `evaluate` call measured; the writers (JSON, CSV, Markdown) are
    `graft_env.eval.report`'s."""

    policy: str
    config: dict[str, Any]
    benchmarks: dict[str, BenchmarkResult]
    samples: list[Sample]
    provenance: dict[str, Any]
    total_seconds: float

    @property
    def average_per_repeat(self) -> list[float]:
        """The headline per repeat: unweighted mean of the benchmarks' pass@1."""
        per_benchmark = np.asarray([b.pass_at_1_per_repeat for b in self.benchmarks.values()])
        return per_benchmark.mean(axis=0).tolist()

    def summary(self) -> dict[str, float | int]:
        """Flat metrics, e.g. "math500/pass@1", "math500/pass@1_std", "average/pass@1"."""
        flat: dict[str, float | int] = {}
        for name, bench in self.benchmarks.items():
            mean, std = mean_std(bench.pass_at_1_per_repeat)
            flat[f"{name}/n_problems"] = len(bench.problem_ids)
            flat[f"{name}/n_skipped"] = len(bench.skipped)
            flat[f"{name}/pass@1"] = mean
            flat[f"{name}/pass@1_std"] = std
            flat[f"{name}/pass@k"] = bench.pass_at_k
            flat[f"{name}/all_fail"] = bench.all_fail_share
        mean, std = mean_std(self.average_per_repeat)
        flat["average/pass@1"] = mean
        flat["average/pass@1_std"] = std
        return flat
