"""The study's paired bootstrap (contrasts, one-label intervals), verdicts and power
calculation, on hand-made records."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.study.stats import (
    Difference,
    label_interval,
    paired_contrast,
    paired_difference,
    seeds_needed,
    t975,
    verdict,
)


def record(label, seed, counts, samples=8, model="m"):
    """One cell record with per-problem success counts per set (as compare.report builds)."""
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
    # standard t-table values (3 decimals)
    assert t975(1) == pytest.approx(12.706, abs=5e-4)
    assert t975(4) == pytest.approx(2.776, abs=5e-4)
    assert t975(1000) == pytest.approx(1.962, abs=5e-4)
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


def noisy_records(labels=("a", "b", "c"), seeds=(0, 1, 2), problems=12, seed=0):
    """Random counts of 8 per problem on two sets, every label on the same problems."""
    rng = np.random.default_rng(seed)
    return [
        record(label, s, {"x": rng.integers(0, 9, problems), "y": rng.integers(0, 9, problems)})
        for label in labels
        for s in seeds
    ]


def as_tuple(d: Difference) -> tuple[float, float, float]:
    return d.mean, d.low, d.high


def test_a_contrast_of_plus_one_minus_one_is_the_paired_difference() -> None:
    records = noisy_records()
    contrast = paired_contrast(records, "m", {"a": 1.0, "b": -1.0}, resamples=2000)
    difference = paired_difference(records, "m", "a", "b", resamples=2000)
    assert as_tuple(contrast) == pytest.approx(as_tuple(difference))
    assert (contrast.seeds, contrast.problems) == (3, 24)
    assert contrast.high - contrast.low > 1.0  # noisy cells: a real interval


def test_swapping_the_labels_negates_the_contrast_and_mirrors_its_interval() -> None:
    records = noisy_records()
    forward = paired_contrast(records, "m", {"a": 1.0, "b": -1.0}, resamples=2000)
    backward = paired_contrast(records, "m", {"b": 1.0, "a": -1.0}, resamples=2000)
    assert backward.mean == pytest.approx(-forward.mean)
    assert (backward.low, backward.high) == pytest.approx((-forward.high, -forward.low))


def test_zero_variance_cells_give_a_degenerate_interval_at_the_exact_value() -> None:
    # every problem of every seed: a 6/8, b 2/8, c 4/8 (75 %, 25 %, 50 %)
    records = [
        record(label, s, {"x": [c] * 5, "y": [c] * 3})
        for label, c in (("a", 6), ("b", 2), ("c", 4))
        for s in (0, 1, 2)
    ]
    assert as_tuple(label_interval(records, "m", "a", resamples=300)) == (75.0, 75.0, 75.0)
    # c - (a + b) / 2 = 50 - 50 = 0; 2c - a = 25
    half = paired_contrast(records, "m", {"c": 1.0, "a": -0.5, "b": -0.5}, resamples=300)
    assert as_tuple(half) == pytest.approx((0.0, 0.0, 0.0))
    double = paired_contrast(records, "m", {"c": 2.0, "a": -1.0}, resamples=300)
    assert as_tuple(double) == pytest.approx((25.0, 25.0, 25.0))


def test_set_weights_select_and_weight_the_sets() -> None:
    # a beats b by 50 points on x and loses by 25 on y, on every problem and seed
    records = [
        record(label, s, {"x": [x] * 4, "y": [y] * 6})
        for label, x, y in (("a", 8, 2), ("b", 4, 4))
        for s in (0, 1)
    ]
    on_x = paired_contrast(records, "m", {"a": 1.0, "b": -1.0}, {"x": 1.0}, resamples=300)
    assert as_tuple(on_x) == (50.0, 50.0, 50.0) and on_x.problems == 4
    on_y = paired_difference(records, "m", "a", "b", sets=["y"], resamples=300)
    assert as_tuple(on_y) == (-25.0, -25.0, -25.0)
    # x minus y, the shape of H7's weak-minus-own skill contrast: 50 - (-25) = 75
    skills = paired_contrast(records, "m", {"a": 1.0, "b": -1.0}, {"x": 1.0, "y": -1.0})
    assert skills.mean == pytest.approx(75.0)
    # unweighted mean of the two sets: (50 - 25) / 2
    both = paired_contrast(records, "m", {"a": 1.0, "b": -1.0}, resamples=300)
    assert both.mean == pytest.approx(12.5)


def test_a_one_label_interval_is_the_bootstrap_of_its_mean_over_seeds_and_problems() -> None:
    records = [record("a", s, {"x": [0, 8]}) for s in (0, 1)]  # 0 % and 100 %: mean 50
    result = label_interval(records, "m", "a", resamples=4000)
    assert result.mean == pytest.approx(50.0) and (result.seeds, result.problems) == (2, 2)
    # two problems resampled: 0, 50 or 100 with probability 1/4, 1/2, 1/4
    assert (result.low, result.high) == (0.0, 100.0)
    base = label_interval([record("base", None, {"x": [4, 4]})], "m", "base", resamples=100)
    assert as_tuple(base) == (50.0, 50.0, 50.0) and base.seeds == 1


def test_a_contrast_pairs_only_the_seeds_every_label_has() -> None:
    records = [record("a", s, {"x": [8]}) for s in (0, 1, 2)] + [
        record("b", s, {"x": [0]}) for s in (1, 2)
    ]
    records.append(record("base", None, {"x": [4]}))
    result = paired_contrast(records, "m", {"a": 1.0, "b": -1.0, "base": 1.0}, resamples=100)
    assert result.seeds == 2 and result.mean == pytest.approx(150.0)


def test_contrasts_name_what_is_wrong() -> None:
    records = [record("a", 0, {"x": [1]}), record("b", 0, {"x": [1]})]
    with pytest.raises(ValueError, match=r"set 'z' is not one of \['x'\]"):
        paired_contrast(records, "m", {"a": 1.0, "b": -1.0}, {"z": 1.0})
    with pytest.raises(ValueError, match="no labels"):
        paired_contrast(records, "m", {})
    with pytest.raises(ValueError, match="no records for label 'c' and model 'n'"):
        label_interval(records, "n", "c")


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 8), min_size=6, max_size=6),
    st.lists(st.integers(0, 8), min_size=6, max_size=6),
    st.floats(-2.0, 2.0),
)
def test_a_contrast_is_linear_in_its_labels(a_counts, b_counts, weight) -> None:
    records = [record("a", s, {"x": a_counts[3 * s : 3 * s + 3]}) for s in (0, 1)]
    records += [record("b", s, {"x": b_counts[3 * s : 3 * s + 3]}) for s in (0, 1)]
    a, b = (label_interval(records, "m", label, resamples=50).mean for label in ("a", "b"))
    contrast = paired_contrast(records, "m", {"a": weight, "b": 1.0}, resamples=50)
    assert contrast.mean == pytest.approx(weight * a + b, abs=1e-9)
