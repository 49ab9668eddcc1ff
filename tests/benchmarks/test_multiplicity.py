"""benchmarks.study.multiplicity: the t-test's p against the quantiles and closed forms, Holm on
known p-values and its properties, Welch's interval by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.study.multiplicity import holm, t_test, t_two_sided_p, welch_interval
from benchmarks.study.stats import t80, t975


@pytest.mark.parametrize("df", [*range(1, 31), 47.5, 200])
def test_p_at_the_quantiles(df):
    assert t_two_sided_p(t975(df), df) == pytest.approx(0.05, abs=1e-9)
    assert t_two_sided_p(t80(df), df) == pytest.approx(0.40, abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 1e3, allow_nan=False))
def test_p_matches_the_closed_forms_for_one_and_two_degrees(t):
    # scipy's t.sf at df = 1 is about 5e-9 off where p is near 1 (tiny t; measured over
    # t in [1e-12, 1e3]); p-values that close to 1 decide nothing
    assert t_two_sided_p(t, 1) == pytest.approx(1 - 2 / math.pi * math.atan(t), abs=1e-8)
    assert t_two_sided_p(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), abs=1e-10)


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 50), st.floats(0, 50), st.integers(1, 200))
def test_p_is_symmetric_and_falls_with_abs_t(t, u, df):
    assert t_two_sided_p(-t, df) == pytest.approx(t_two_sided_p(t, df))
    low, high = sorted((t, u))
    assert t_two_sided_p(high, df) <= t_two_sided_p(low, df) + 1e-12
    assert 0.0 <= t_two_sided_p(t, df) <= 1.0


def test_t_test_by_hand_and_without_spread():
    values = [1.0, 2.0, 3.0, 2.5]
    t, p = t_test(values)
    assert t == pytest.approx(np.mean(values) / (np.std(values, ddof=1) / 2))
    assert p == pytest.approx(t_two_sided_p(t, 3))
    assert t_test([0.0, 0.0]) == (0.0, 1.0)
    assert t_test([2.0, 2.0])[1] == 0.0
    with pytest.raises(ValueError, match="at least two"):
        t_test([1.0])


def test_holm_on_known_p_values():
    # statsmodels.stats.multitest.multipletests(p, method="holm") gives the same
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.01, 0.02, 0.03, 0.5]) == pytest.approx([0.04, 0.06, 0.06, 0.5])
    assert holm([0.2, 0.9]) == pytest.approx([0.4, 0.9])
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        holm([1.5])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=8))
def test_holm_properties(ps):
    adjusted = holm(ps)
    assert all(p - 1e-12 <= a <= 1.0 for p, a in zip(ps, adjusted, strict=True))
    assert min(adjusted) == pytest.approx(min(1.0, len(ps) * min(ps)))
    for i, j in [(i, j) for i in range(len(ps)) for j in range(len(ps))]:
        if ps[i] <= ps[j]:
            assert adjusted[i] <= adjusted[j] + 1e-12  # the order of the p-values is kept


def test_welch_interval_by_hand():
    x, y = [1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 1.0, 2.0, 5.0]
    found = welch_interval(x, y)
    va, vb = np.var(x, ddof=1) / 4, np.var(y, ddof=1) / 5
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 4)
    half = t975(df) * math.sqrt(va + vb)
    assert found["difference"] == pytest.approx(0.7)
    assert (found["low"], found["high"], found["df"]) == pytest.approx((0.7 - half, 0.7 + half, df))
