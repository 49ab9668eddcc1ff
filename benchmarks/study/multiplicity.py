"""Tests and multiplicity for per-seed paired differences: the one-sample t-test's p-value,
Holm's step-down adjustment, and Welch's interval for a difference of two groups' means.

- `t_two_sided_p(t, df)`: P(|T| >= |t|) for Student's t with `df` degrees of freedom, from the
  regularised incomplete beta function, I_{df/(df+t^2)}(df/2, 1/2) (Abramowitz & Stegun
  26.7.1 with 26.5.27), evaluated by its continued fraction (Numerical Recipes' betacf). No
  SciPy: the project does not depend on it.
- `t_test(values)`: the t statistic and two-sided p of "mean = 0" over S per-seed values.
- `holm(p_values)`: Holm (1979) adjusted p-values, in the input order: the i-th smallest p
  times (m - i + 1), made monotone, capped at 1; rejecting where adjusted p < alpha controls
  the family-wise error at alpha.
- `welch_interval(x, y)`: mean(x) - mean(y) with its 95 % Welch t-interval (Welch-Satterthwaite
  degrees of freedom, rounded down for the t quantile).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from benchmarks.study.stats import t975

_MAX_TERMS = 500
_EPS = 1e-15
_TINY = 1e-300


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS + 1):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta ({a}, {b}, {x}): no convergence")


def incomplete_beta(a: float, b: float, x: float, complement: float | None = None) -> float:
    """The regularised incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1;
    `complement` is 1 - x where the caller has it exactly (1.0 - x cancels for x near 1)."""
    if a <= 0 or b <= 0 or not 0.0 <= x <= 1.0:
        raise ValueError(f"incomplete_beta needs a, b > 0 and 0 <= x <= 1; got {a}, {b}, {x}")
    y = 1.0 - x if complement is None else complement
    if x == 0.0 or y == 0.0:  # by the complement: x can round to 1.0 while 1 - x > 0
        return 0.0 if x == 0.0 else 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, y) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` > 0 degrees of freedom."""
    if df <= 0:
        raise ValueError(f"t_two_sided_p needs df > 0, got {df}")
    if math.isinf(t):
        return 0.0
    # x = df / (df + t^2) and its complement t^2 / (df + t^2), each computed directly: for
    # |t| ~ 1e-7, 1 - x would cancel and p lose ~1e-9 (found by the exploration pass)
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t), t * t / (df + t * t))


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
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    diff, se = float(a.mean() - b.mean()), math.sqrt(va + vb)
    if se == 0.0:
        return {"difference": diff, "low": diff, "high": diff, "df": float(a.size + b.size - 2)}
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = t975(max(1, math.floor(df))) * se
    return {"difference": diff, "low": diff - half, "high": diff + half, "df": float(df)}
