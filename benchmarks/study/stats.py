"""The study's statistics: paired contrasts with bootstrap intervals, verdicts, power.

Everything works on the per-problem success rates that `compare.report.cell_records`
already carries (`record["problems"][set][problem_id]` = correct samples of that problem,
`record["samples"][set]` = samples per problem), so the intervals come from the same numbers
as the table.

- `paired_contrast`: a weighted sum over labels of one model's average pass@1 (percentage
  points; e.g. {GRAFT: 1, GRPO: -1}, or {stored: 1, GRAFT: -0.5, GRPO: -0.5}), the sets
  weighted too (default: the unweighted mean of all sets), averaged over seeds, and its 95 %
  interval from a two-level bootstrap: seeds are resampled with replacement (the labels
  share a seed's prompt stream, so seeds are paired), and the problems of every evaluation
  set are resampled with replacement (every cell is evaluated on the same fixed problems, so
  problems are paired too). Both sources of uncertainty enter the interval: the training
  seed and the finite test set. `paired_difference` (label minus baseline) and
  `label_interval` (one label's mean) are its two common cases. `contrast_replicates`: the
  same point and bootstrap, returning the replicates themselves (to combine contrasts that
  are resampled independently, e.g. one per dose).
- `verdict`: supported / refuted / unresolved for a hypothesis of the form
  "difference > 0" (superiority) or "difference >= -margin" (non-inferiority).
- `seeds_needed`: the smallest number of seeds whose t-interval on a paired difference
  with the given seed-to-seed standard deviation has a half-width <= the target.
- `t_interval` and `detectable_effect`: over S per-seed paired differences, the 95 %
  t-interval of their mean and the smallest effect a paired t-test (two-sided 5 %) detects
  at 80 % power, (t975(S-1) + t80(S-1)) x sd / sqrt(S) (sd: the sample std, ddof 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.stats

Record = Mapping[str, Any]  # one cell record of compare.report.cell_records


def t975(df: float) -> float:
    """Two-sided 95 % quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"t975 needs df >= 1, got {df}")
    return float(scipy.stats.t.ppf(0.975, df))


def t80(df: float) -> float:
    """One-sided 80 % quantile of Student's t with `df` degrees of freedom (the power term)."""
    if df < 1:
        raise ValueError(f"t80 needs df >= 1, got {df}")
    return float(scipy.stats.t.ppf(0.80, df))


@dataclass(frozen=True)
class Difference:
    """A contrast of average pass@1 (a paired difference, or one label's mean), in
    percentage points, with its 95 % interval."""

    mean: float
    low: float
    high: float
    seeds: int
    problems: int


def _rates(record: Record, problem_ids: Mapping[str, Sequence[str]]) -> list[np.ndarray]:
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


def _by_seed(records: Sequence[Record], label: str, model: str) -> dict[Any, Record]:
    found = {r["seed"]: r for r in records if r["label"] == label and r["model"] == model}
    if not found:
        raise ValueError(f"no records for label {label!r} and model {model!r}")
    return found


def _paired(cells: Mapping[str, Mapping[Any, Record]], model: str) -> dict[Any, dict[str, Record]]:
    """Seed -> label -> record, for the seeds every trained label has; a label with a
    single seed-less record (the untrained base) pairs with every one of them."""
    seedless = {label for label, found in cells.items() if list(found) == [None]}
    seeded = [set(found) for label, found in cells.items() if label not in seedless]
    seeds = sorted(set.intersection(*seeded), key=str) if seeded else [None]
    if not seeds:
        raise ValueError(f"labels {list(cells)} share no seed for model {model!r}")
    return {
        s: {label: found[None if label in seedless else s] for label, found in cells.items()}
        for s in seeds
    }


def paired_contrast(
    records: Sequence[Record],
    model: str,
    label_weights: Mapping[str, float],
    set_weights: Mapping[str, float] | None = None,
    *,
    resamples: int = 10_000,
    seed: int = 0,
) -> Difference:
    """sum over labels L and sets S of label_weights[L] x set_weights[S] x the mean
    per-problem pass@1 of L on S, for `model`, mean over the paired seeds, in points.

    `set_weights` default: 1/|sets| on every evaluated set (the unweighted average);
    sets it leaves out do not enter. Seeds pair by value (see `_paired`).
    """
    point, replicates, seeds, problems = _bootstrap(
        "paired_contrast", records, model, label_weights, set_weights, resamples, seed
    )
    low, high = np.quantile(replicates, [0.025, 0.975])
    return Difference(
        mean=100 * float(point),
        low=100 * float(low),
        high=100 * float(high),
        seeds=seeds,
        problems=problems,
    )


@dataclass(frozen=True)
class Replicates:
    """A contrast's point estimate and its bootstrap replicates, in percentage points."""

    mean: float
    values: np.ndarray  # [resamples]
    seeds: int
    problems: int


def contrast_replicates(
    records: Sequence[Record],
    model: str,
    label_weights: Mapping[str, float],
    set_weights: Mapping[str, float] | None = None,
    *,
    resamples: int = 10_000,
    seed: int | Sequence[int] = 0,
) -> Replicates:
    """`paired_contrast`'s point and its bootstrap replicates themselves (the same two-level
    resampling of seeds and problems, the same draws for an int `seed`), for a statistic
    that combines several independently resampled contrasts; `seed` may be a sequence
    (numpy's SeedSequence entropy, e.g. (0, i) for the i-th of several independent streams)."""
    point, replicates, seeds, problems = _bootstrap(
        "contrast_replicates", records, model, label_weights, set_weights, resamples, seed
    )
    return Replicates(
        mean=100 * float(point), values=100 * replicates, seeds=seeds, problems=problems
    )


def _bootstrap(
    caller: str,
    records: Sequence[Record],
    model: str,
    label_weights: Mapping[str, float],
    set_weights: Mapping[str, float] | None,
    resamples: int,
    seed: int | Sequence[int],
) -> tuple[float, np.ndarray, int, int]:
    """The weighted contrast's point and its two-level bootstrap replicates (fractions: seeds
    resampled, and within each set the problems), with the numbers of seeds and problems."""
    if not label_weights:
        raise ValueError(f"{caller} for model {model!r}: no labels to weigh")
    cells = _paired({label: _by_seed(records, label, model) for label in label_weights}, model)
    seeds = list(cells)
    first = next(iter(cells[seeds[0]].values()))
    known = list(first["problems"])
    if set_weights is None:
        set_weights = dict.fromkeys(known, 1.0 / len(known))
    unknown = [name for name in set_weights if name not in first["problems"]]
    if unknown:
        raise ValueError(f"{caller}: set {unknown[0]!r} is not one of {known}")
    names = list(set_weights)
    problem_ids = {name: sorted(first["problems"][name]) for name in names}
    # per set: [seeds, problems], the weighted sum over labels of per-problem pass@1
    contrast = [np.zeros((len(seeds), len(problem_ids[name]))) for name in names]
    for label, weight in label_weights.items():
        for row, s in enumerate(seeds):
            for values, rates in zip(contrast, _rates(cells[s][label], problem_ids), strict=True):
                values[row] += weight * rates
    point = sum(set_weights[name] * d.mean() for name, d in zip(names, contrast, strict=True))
    rng = np.random.default_rng(seed)
    replicates = np.zeros(resamples)
    seed_draws = rng.integers(0, len(seeds), size=(resamples, len(seeds)))
    for name, d in zip(names, contrast, strict=True):
        problem_draws = rng.integers(0, d.shape[1], size=(resamples, d.shape[1]))
        per_seed = d[:, problem_draws].mean(axis=2)  # [seeds, resamples]
        resampled = np.take_along_axis(per_seed.T, seed_draws, axis=1).mean(axis=1)
        replicates += set_weights[name] * resampled
    return float(point), replicates, len(seeds), sum(len(ids) for ids in problem_ids.values())


def _mean_of(sets: Sequence[str] | None) -> dict[str, float] | None:
    """Set weights of the unweighted mean over `sets` (None: over every evaluated set)."""
    return None if sets is None else dict.fromkeys(sets, 1.0 / len(sets))


def paired_difference(
    records: Sequence[Record],
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
    weights = {label: 1.0}
    weights[baseline] = weights.get(baseline, 0.0) - 1.0  # a label against itself: 0
    return paired_contrast(records, model, weights, _mean_of(sets), resamples=resamples, seed=seed)


def label_interval(
    records: Sequence[Record],
    model: str,
    label: str,
    *,
    sets: Sequence[str] | None = None,
    resamples: int = 10_000,
    seed: int = 0,
) -> Difference:
    """One label's mean average pass@1 for `model` over its seeds, in points, with the
    same two-level bootstrap interval (seeds and problems)."""
    return paired_contrast(
        records, model, {label: 1.0}, _mean_of(sets), resamples=resamples, seed=seed
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


def _seed_spread(values: Sequence[float]) -> tuple[int, float, float]:
    """(S, mean, sample std) of S >= 2 per-seed values."""
    array = np.asarray(values, dtype=np.float64)
    if array.size < 2:
        raise ValueError(f"need at least 2 per-seed values, got {array.size}")
    return int(array.size), float(array.mean()), float(array.std(ddof=1))


def t_interval(values: Sequence[float]) -> tuple[float, float]:
    """95 % t-interval of the mean of S >= 2 per-seed values: mean +/- t975(S-1) sd / sqrt(S)."""
    count, mean, std = _seed_spread(values)
    half = t975(count - 1) * std / np.sqrt(count)
    return mean - half, mean + half


def detectable_effect(values: Sequence[float]) -> float:
    """The smallest true mean difference a paired t-test on S >= 2 per-seed values (two-sided
    5 %) detects with 80 % power: (t975(S-1) + t80(S-1)) x sd / sqrt(S), sd the values' own."""
    count, _, std = _seed_spread(values)
    return float((t975(count - 1) + t80(count - 1)) * std / np.sqrt(count))
