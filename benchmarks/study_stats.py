"""The study's statistics: paired differences with bootstrap intervals, verdicts, power.

Everything works on the per-problem success rates that `compare_report.cell_records`
already carries (`record["problems"][set][problem_id]` = correct samples of that problem,
`record["samples"][set]` = samples per problem), so the intervals come from the same numbers
as the table.

- `paired_difference`: mean difference of the average pass@1 (percentage points) between
  two labels for one model, and its 95 % interval from a two-level bootstrap: seeds are
  resampled with replacement (the two labels share a seed's prompt stream, so seeds are
  paired), and the problems of every evaluation set are resampled with replacement (every
  cell is evaluated on the same fixed problems, so problems are paired too). Both sources
  of uncertainty enter the interval: the training seed and the finite test set.
- `verdict`: supported / refuted / unresolved for a hypothesis of the form
  "difference > 0" (superiority) or "difference >= -margin" (non-inferiority).
- `seeds_needed`: the smallest number of seeds whose t-interval on a paired difference
  with the given seed-to-seed standard deviation has a half-width <= the target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# two-sided 95 % quantiles of Student's t, df = 1..30 (standard table values)
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.960


def t975(df: int) -> float:
    """Two-sided 95 % quantile of Student's t with `df` degrees of freedom (normal above 30)."""
    if df < 1:
        raise ValueError(f"t975 needs df >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else _Z975


@dataclass(frozen=True)
class Difference:
    """A paired difference of average pass@1, in percentage points, with its 95 % interval."""

    mean: float
    low: float
    high: float
    seeds: int
    problems: int


def _rates(record: Mapping[str, Any], problem_ids: Mapping[str, Sequence[str]]) -> list[np.ndarray]:
    """Per evaluation set, the success rate of every problem, in `problem_ids` order."""
    rates = []
    for name, ids in problem_ids.items():
        counts = record["problems"][name]
        missing = [p for p in ids if p not in counts]
        if missing:
            raise ValueError(
                f"{record['label']}/{record['model']} seed {record['seed']}: set {name!r} lacks "
                f"problems {missing[:3]}; every cell must be evaluated on the same problems"
            )
        samples = record["samples"][name]
        if not samples:
            raise ValueError(
                f"{record['label']}/{record['model']} seed {record['seed']}: set {name!r} has no "
                "sample count (a result written before `k` was stored): re-evaluate the cell"
            )
        rates.append(np.array([counts[p] for p in ids], dtype=np.float64) / samples)
    return rates


def _by_seed(records: Sequence[Mapping[str, Any]], label: str, model: str) -> dict[Any, Mapping]:
    found = {r["seed"]: r for r in records if r["label"] == label and r["model"] == model}
    if not found:
        raise ValueError(f"no records for label {label!r} and model {model!r}")
    return found


def paired_difference(
    records: Sequence[Mapping[str, Any]],
    model: str,
    label: str,
    baseline: str,
    *,
    sets: Sequence[str] | None = None,
    resamples: int = 10_000,
    seed: int = 0,
) -> Difference:
    """`label` minus `baseline` for `model`: mean over seeds of the difference of the
    unweighted average over `sets` (default: all) of per-problem pass@1, in points.

    Seeds pair by value; a label with a single seed-less record (the untrained base)
    pairs with every seed of the other.
    """
    treated, control = _by_seed(records, label, model), _by_seed(records, baseline, model)
    if None in control and len(control) == 1:
        control = dict.fromkeys(treated, control[None])
    if None in treated and len(treated) == 1:
        treated = dict.fromkeys(control, treated[None])
    seeds = sorted(set(treated) & set(control), key=str)
    if not seeds:
        raise ValueError(f"{label!r} and {baseline!r} share no seed for model {model!r}")
    first = treated[seeds[0]]
    names = list(sets) if sets is not None else list(first["problems"])
    problem_ids = {name: sorted(first["problems"][name]) for name in names}
    per_seed = [
        [
            a - b
            for a, b in zip(
                _rates(treated[s], problem_ids), _rates(control[s], problem_ids), strict=True
            )
        ]
        for s in seeds
    ]
    diffs = [np.stack([row[j] for row in per_seed]) for j in range(len(names))]  # [seeds, problems]
    point = float(np.mean([d.mean() for d in diffs]))
    rng = np.random.default_rng(seed)
    replicates = np.zeros(resamples)
    seed_draws = rng.integers(0, len(seeds), size=(resamples, len(seeds)))
    for d in diffs:
        problem_draws = rng.integers(0, d.shape[1], size=(resamples, d.shape[1]))
        per_seed = d[:, problem_draws].mean(axis=2)  # [seeds, resamples]
        replicates += np.take_along_axis(per_seed.T, seed_draws, axis=1).mean(axis=1)
    replicates /= len(diffs)
    low, high = np.quantile(replicates, [0.025, 0.975])
    return Difference(
        mean=100 * point,
        low=100 * float(low),
        high=100 * float(high),
        seeds=len(seeds),
        problems=sum(len(ids) for ids in problem_ids.values()),
    )


def verdict(difference: Difference, margin: float = 0.0) -> str:
    """'supported' if the interval lies above -margin, 'refuted' if it lies below it,
    else 'unresolved' (margin 0: superiority; margin > 0: non-inferiority by `margin` points)."""
    if difference.low > -margin:
        return "supported"
    if difference.high < -margin:
        return "refuted"
    return "unresolved"


def seeds_needed(seed_std: float, half_width: float = 1.0, *, at_least: int = 2) -> int:
    """Smallest seed count S >= at_least with t975(S-1) * seed_std / sqrt(S) <= half_width.

    `seed_std` is the standard deviation over seeds of a paired per-seed difference, in the
    same unit as `half_width` (points)."""
    if seed_std < 0 or half_width <= 0:
        raise ValueError(f"need seed_std >= 0 and half_width > 0, got {seed_std}, {half_width}")
    count = max(at_least, 2)
    while t975(count - 1) * seed_std / np.sqrt(count) > half_width:
        count += 1
    return count
