"""The rollout correction's weights and metrics (algorithms.core.rollout_correction)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.core import correction_weights
from algorithms.core.rollout_correction import LogprobGapError, check_logprob_gap

SETTINGS = settings(max_examples=100, deadline=None)
modes = st.sampled_from(["monitor", "truncate", "mask"])
levels = st.sampled_from(["token", "sequence"])
caps = st.floats(1.01, 10.0)


@st.composite
def batches(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Engine and trainer log-probs [B, T] (junk on padding) and a right-padded mask."""
    rows, cols = draw(st.integers(1, 5)), draw(st.integers(1, 7))
    values = st.floats(-15.0, 0.0)
    engine = np.array(draw(st.lists(values, min_size=rows * cols, max_size=rows * cols)))
    shift = np.array(
        draw(st.lists(st.floats(-3.0, 3.0), min_size=rows * cols, max_size=rows * cols))
    )
    lengths = draw(st.lists(st.integers(0, cols), min_size=rows, max_size=rows))
    mask = (np.arange(cols)[None, :] < np.array(lengths)[:, None]).astype(np.float64)
    engine, trainer = engine.reshape(rows, cols), (engine + shift).reshape(rows, cols)
    junk = np.where(mask == 0, np.nan, 0.0)  # padding may hold anything
    return engine + junk, trainer + junk, mask


@SETTINGS
@given(batch=batches(), mode=modes, level=levels, cap=caps)
def test_weights_lie_in_zero_to_cap_and_are_zero_off_the_mask(batch, mode, level, cap):
    engine, trainer, mask = batch
    weights = correction_weights(engine, trainer, mask, mode, level, cap).weights
    assert weights.shape == mask.shape
    assert np.all((weights >= 0) & (weights <= cap))
    assert np.all(weights[mask == 0] == 0)


@SETTINGS
@given(batch=batches(), level=levels, cap=caps)
def test_truncate_is_the_ratio_capped_at_cap(batch, level, cap):
    engine, trainer, mask = batch
    kept = mask == 1
    diff = np.where(kept, trainer - engine, 0.0)
    log_ratio = (
        diff if level == "token" else np.repeat(diff.sum(1, keepdims=True), diff.shape[1], 1)
    )
    expected = np.minimum(np.exp(np.clip(log_ratio, -20, 20)), cap)
    weights = correction_weights(engine, trainer, mask, "truncate", level, cap).weights
    np.testing.assert_allclose(weights[kept], expected[kept], rtol=1e-12)


@SETTINGS
@given(batch=batches(), level=levels, cap=caps)
def test_mask_gives_one_inside_the_band_and_zero_outside(batch, level, cap):
    engine, trainer, mask = batch
    kept = mask == 1
    result = correction_weights(engine, trainer, mask, "mask", level, cap)
    assert set(np.unique(result.weights[kept])) <= {0.0, 1.0}
    diff = np.where(kept, trainer - engine, 0.0)
    log_ratio = (
        diff if level == "token" else np.repeat(diff.sum(1, keepdims=True), diff.shape[1], 1)
    )
    inside = np.abs(log_ratio) <= math.log(cap)
    np.testing.assert_array_equal(result.weights[kept] == 1.0, inside[kept])
    dropped = result.metrics["above_cap_share"] + result.metrics["below_floor_share"]
    assert result.metrics["weight_mean"] == pytest.approx(1.0 - dropped if kept.any() else 0.0)


@SETTINGS
@given(batch=batches(), cap=caps)
def test_sequence_level_gives_every_token_of_a_response_its_one_weight(batch, cap):
    engine, trainer, mask = batch
    for mode in ("truncate", "mask"):
        weights = correction_weights(engine, trainer, mask, mode, "sequence", cap).weights
        for row, kept in zip(weights, mask == 1, strict=True):
            assert len(set(row[kept].tolist())) <= 1


@SETTINGS
@given(batch=batches(), mode=modes, level=levels, cap=caps)
def test_equal_logprobs_give_weight_one_and_no_mismatch(batch, mode, level, cap):
    engine, _, mask = batch
    result = correction_weights(engine, engine.copy(), mask, mode, level, cap)
    kept = mask == 1
    assert np.all(result.weights[kept] == 1.0)
    metrics = result.metrics
    assert metrics["kl_k3"] == 0.0 and metrics["logp_diff_mean"] == 0.0
    assert metrics["logp_diff_max"] == 0.0
    assert metrics["above_cap_share"] == metrics["below_floor_share"] == 0.0
    assert metrics["ratio_mean"] == metrics["weight_mean"] == (1.0 if kept.any() else 0.0)


@SETTINGS
@given(batch=batches(), mode=modes, level=levels, cap=caps)
def test_mismatch_metrics_are_those_of_the_kept_tokens(batch, mode, level, cap):
    engine, trainer, mask = batch
    kept = mask == 1
    metrics = correction_weights(engine, trainer, mask, mode, level, cap).metrics
    assert metrics["tokens"] == kept.sum() and metrics["responses"] == kept.any(1).sum()
    assert metrics["kl_k3"] >= 0.0
    assert 0.0 <= metrics["logp_diff_mean"] <= metrics["logp_diff_max"]
    if kept.any():
        diff = (trainer - engine)[kept]
        assert metrics["logp_diff_max"] == pytest.approx(np.abs(diff).max())
        assert metrics["kl_k3"] == pytest.approx(np.mean(np.exp(diff) - diff - 1), abs=1e-12)


def test_k3_of_a_tiny_mismatch_is_not_negative():
    # log-probs ~1e-11 apart (hypothesis found 6.8e-12 on a fresh clone): exp(d) - d - 1
    # cancels to -1.1e-16 < 0 on both of these tokens; expm1(d) - d is >= 0 for every d
    engine = np.array([[-1.0, -0.25]])
    trainer = np.array([[-0.9999999999999915, -0.24999999995116853]])
    # (on this machine's libm exp(d) - d - 1 is -1.1e-16 on both; not asserted: another libm
    # may round them otherwise, and the fixed metric must hold on any)
    metrics = correction_weights(engine, trainer, np.ones((1, 2)), "monitor", "token", 2.0).metrics
    assert 0.0 <= metrics["kl_k3"] < 1e-20


@SETTINGS
@given(batch=batches(), level=levels, cap=caps)
def test_monitor_weighs_nothing_but_measures_what_truncate_and_mask_would_do(batch, level, cap):
    engine, trainer, mask = batch
    monitor = correction_weights(engine, trainer, mask, "monitor", level, cap)
    assert np.all(monitor.weights[mask == 1] == 1.0)
    for mode in ("truncate", "mask"):
        other = correction_weights(engine, trainer, mask, mode, level, cap).metrics
        same = {k: v for k, v in other.items() if k != "weight_mean"}
        assert same == {k: v for k, v in monitor.metrics.items() if k != "weight_mean"}


def test_a_large_mismatch_is_capped_without_overflow():
    engine = np.array([[-50.0, -1.0, -1.0]])
    trainer = np.array([[-0.1, -1.0, -60.0]])
    mask = np.ones((1, 3))
    token = correction_weights(engine, trainer, mask, "truncate", "token", 2.0)
    np.testing.assert_array_equal(token.weights, [[2.0, 1.0, math.exp(-20)]])
    assert token.metrics["above_cap_share"] == token.metrics["below_floor_share"] == 1 / 3
    masked = correction_weights(engine, trainer, mask, "mask", "sequence", 2.0)
    np.testing.assert_array_equal(masked.weights, [[0.0, 0.0, 0.0]])  # Σ d = -10.1
    assert masked.metrics["below_floor_share"] == 1.0 and np.isfinite(masked.metrics["ratio_mean"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mode": "clip"}, "mode must be one of"),
        ({"level": "geometric"}, "level must be one of"),
        ({"cap": 1.0}, "cap must be a finite number > 1"),
        ({"cap": math.inf}, "cap must be a finite number > 1"),
        ({"mask": np.full((2, 2), 0.5)}, "mask must hold only 0 and 1"),
        ({"trainer_logp": np.zeros((2, 3))}, r"trainer_logp has shape \(2, 3\)"),
        ({"engine_logp": np.array([[0.0, np.nan], [0.0, 0.0]])}, r"engine_logp\[0, 1\]"),
    ],
)
def test_bad_inputs_are_refused_by_name(change, message):
    args = {
        "engine_logp": np.zeros((2, 2)),
        "trainer_logp": np.zeros((2, 2)),
        "mask": np.ones((2, 2)),
        "mode": "truncate",
        "level": "token",
        "cap": 2.0,
    }
    with pytest.raises(ValueError, match=message):
        correction_weights(**{**args, **change})


def test_the_gap_check_stops_above_its_bound_in_one_line_and_never_without_one():
    """At the bound the run goes on (the bound is the largest allowed mean); above it, or
    with a NaN mean, one line names where, the step, the gap and the bound."""
    check_logprob_gap("agent a", 3, 0.1, 5.0, 0.1)
    check_logprob_gap("agent a", 3, 7.0, 9.0, None)
    with pytest.raises(LogprobGapError) as caught:
        check_logprob_gap("agent a", 3, 0.25, 1.5, 0.1)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("agent a: step 3: ")
    assert "0.25 nats per token" in line and "largest 1.5" in line
    assert "max_logprob_gap=0.1" in line and "weight-sync" in line
    with pytest.raises(LogprobGapError, match="nan nats"):
        check_logprob_gap("agent a", 0, math.nan, math.nan, 0.1)
    assert issubclass(LogprobGapError, ValueError)  # `graft` prints a ValueError in one line
