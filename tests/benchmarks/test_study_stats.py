"""The study's paired bootstrap, verdicts and power calculation, on hand-made records."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.study_stats import Difference, paired_difference, seeds_needed, t975, verdict


def record(label, seed, counts, samples=8, model="m"):
    """One cell record with per-problem success counts per set (as compare_report builds)."""
    return {
        "label": label,
        "model": model,
        "seed": seed,
        "problems": {name: {f"p{i}": c for i, c in enumerate(cs)} for name, cs in counts.items()},
        "samples": dict.fromkeys(counts, samples),
    }


def test_the_point_estimate_is_the_mean_over_seeds_of_the_unweighted_set_average() -> None:
    records = [
        record("a", 0, {"x": [8, 0], "y": [4, 4, 4, 4]}),  # x 50 %, y 50 %
        record("b", 0, {"x": [0, 0], "y": [4, 4, 4, 4]}),  # x 0 %, y 50 % -> diff 25 points
        record("a", 1, {"x": [8, 8], "y": [8, 8, 8, 8]}),
        record("b", 1, {"x": [8, 8], "y": [8, 8, 8, 8]}),  # diff 0
    ]
    result = paired_difference(records, "m", "a", "b", resamples=2000)
    assert result.mean == pytest.approx(12.5)
    assert result.seeds == 2 and result.problems == 6
    assert result.low <= result.mean <= result.high


def test_identical_cells_have_a_zero_width_interval_at_zero() -> None:
    counts = {"x": [1, 5, 8, 0, 3]}
    records = [record(label, s, counts) for label in ("a", "b") for s in (0, 1, 2)]
    result = paired_difference(records, "m", "a", "b", resamples=500)
    assert (result.mean, result.low, result.high) == (0.0, 0.0, 0.0)


def test_a_seedless_base_pairs_with_every_seed() -> None:
    records = [record("base", None, {"x": [0, 0]})] + [
        record("grpo", s, {"x": [8, c]}) for s, c in ((0, 0), (1, 8))
    ]
    result = paired_difference(records, "m", "grpo", "base", resamples=500)
    assert result.mean == pytest.approx(75.0) and result.seeds == 2


def test_seed_noise_widens_the_interval_and_more_problems_narrow_it() -> None:
    rng = np.random.default_rng(0)

    def cells(problems, seed_noise):
        out = []
        for s in range(4):
            shift = rng.normal(0, seed_noise)
            base = rng.binomial(8, 0.4, size=problems)
            better = np.clip(base + rng.binomial(1, 0.3 + shift, size=problems), 0, 8)
            out += [record("a", s, {"x": better.tolist()}), record("b", s, {"x": base.tolist()})]
        return out

    def width(problems, noise):
        d = paired_difference(cells(problems, noise), "m", "a", "b", resamples=2000)
        return d.high - d.low

    assert width(400, 0.0) < width(50, 0.0)
    assert width(400, 0.2) > width(400, 0.0)


def test_records_on_different_problems_are_refused() -> None:
    records = [record("a", 0, {"x": [1, 2, 3]}), record("b", 0, {"x": [1, 2]})]
    with pytest.raises(ValueError, match=r"lacks problems.*same problems"):
        paired_difference(records, "m", "a", "b")


def test_missing_labels_and_disjoint_seeds_are_refused() -> None:
    records = [record("a", 0, {"x": [1]}), record("b", 1, {"x": [1]})]
    with pytest.raises(ValueError, match="no records for label 'c'"):
        paired_difference(records, "m", "c", "b")
    with pytest.raises(ValueError, match="share no seed"):
        paired_difference(records, "m", "a", "b")


@pytest.mark.parametrize(
    ("low", "high", "margin", "expected"),
    [
        (0.2, 1.5, 0.0, "supported"),
        (-0.1, 1.5, 0.0, "unresolved"),
        (-2.0, -0.3, 0.0, "refuted"),
        (-0.8, 0.5, 1.0, "supported"),  # non-inferior by 1 point
        (-1.5, 0.5, 1.0, "unresolved"),
        (-3.0, -1.2, 1.0, "refuted"),
    ],
)
def test_verdicts(low, high, margin, expected) -> None:
    assert verdict(Difference((low + high) / 2, low, high, 3, 100), margin) == expected


def test_t_quantiles() -> None:
    assert t975(1) == pytest.approx(12.706)
    assert t975(4) == pytest.approx(2.776)
    assert t975(1000) == pytest.approx(1.96)
    with pytest.raises(ValueError, match="df >= 1"):
        t975(0)


@settings(max_examples=100, deadline=None)
@given(st.floats(0.0, 5.0), st.floats(0.2, 3.0))
def test_seeds_needed_is_the_smallest_count_that_meets_the_half_width(std, half) -> None:
    count = seeds_needed(std, half)
    assert count >= 2
    assert t975(count - 1) * std / np.sqrt(count) <= half
    if count > 2:
        assert t975(count - 2) * std / np.sqrt(count - 1) > half


def test_seeds_needed_worked_example() -> None:
    # a per-seed difference with std 1 point needs 7 seeds for +/- 1.0 (t(6) = 2.447)
    assert seeds_needed(1.0, 1.0) == 7
    with pytest.raises(ValueError, match="half_width > 0"):
        seeds_needed(1.0, 0.0)


def test_a_result_without_its_sample_count_is_refused() -> None:
    records = [record("a", 0, {"x": [1]}), record("b", 0, {"x": [1]})]
    records[0]["samples"]["x"] = None
    with pytest.raises(ValueError, match=r"no sample count.*re-evaluate"):
        paired_difference(records, "m", "a", "b")
