"""Tests and multiplicity for per-seed paired differences: the one-sample t-test's p-value,
Holm's step-down adjustment, and Welch's interval for a difference of two groups' means.
Student's t and Welch's test come from scipy.stats; Holm's adjustment is written here.

- `t_two_sided_p(t, df)`: P(|T| >= |t|) for Student's t with `df` degrees of freedom.
- `t_test(values)`: the t statistic and two-sided p of "mean = 0" over S per-seed values.
- `holm(p_values)`: Holm (1979) adjusted p-values, in the input order: the i-th smallest p
  times (m - i + 1), made monotone, capped at 1; rejecting where adjusted p < alpha controls
  the family-wise error at alpha.
- `welch_interval(x, y)`: mean(x) - mean(y) with its 95 % Welch t-interval (Welch-Satterthwaite
  degrees of freedom).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import scipy.stats


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` > 0 degrees of freedom."""
    if df <= 0:
        raise ValueError(f"t_two_sided_p needs df > 0, got {df}")
    return float(2.0 * scipy.stats.t.sf(abs(t), df))


def t_test(values: Sequence[float]) -> tuple[float, float]:
    """(t, two-sided p) of the one-sample t-test of mean = 0 over at least two values; with
    no spread, p is 1 for a mean of 0 and 0 otherwise (t = +/- inf)."""
    array = np.asarray(values, dtype=np.float64)
    if array.size < 2:
        raise ValueError(f"t_test needs at least two values, got {array.size}")
    mean, sd = float(array.mean()), float(array.std(ddof=1))
    if sd == 0.0:
        return (0.0, 1.0) if mean == 0.0 else (math.copysign(math.inf, mean), 0.0)
    t = mean / (sd / math.sqrt(array.size))
    return t, t_two_sided_p(t, array.size - 1)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given."""
    for p in p_values:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"holm: p-values must lie in [0, 1], got {p}")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def welch_interval(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """mean(x) - mean(y), its 95 % Welch t-interval and degrees of freedom (>= 2 values each)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.size < 2 or b.size < 2:
        raise ValueError(f"welch_interval needs >= 2 values per group, got {a.size} and {b.size}")
    diff = float(a.mean() - b.mean())
    if a.var(ddof=1) + b.var(ddof=1) == 0.0:
        return {"difference": diff, "low": diff, "high": diff, "df": float(a.size + b.size - 2)}
    result = scipy.stats.ttest_ind(a, b, equal_var=False)
    interval = result.confidence_interval(0.95)
    return {
        "difference": diff,
        "low": float(interval.low),
        "high": float(interval.high),
        "df": float(result.df),
    }
