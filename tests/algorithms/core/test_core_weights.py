"""Compatibility scores and weights (Eq.6-8), the log-likelihood normaliser and random admission."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.core import (
    admitted_by_floor,
    admitted_weights,
    compatibility_scores,
    compatibility_weights,
    normalised_loglik,
    random_admission,
)

SETTINGS = settings(max_examples=100, deadline=None)
mean_logps = st.lists(st.floats(-30.0, 0.0), min_size=1, max_size=16)
deltas = st.floats(0.0, 0.999)


@st.composite
def logp_pairs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """Receiver and source mean log-probs for the same transferred responses."""
    receiver = draw(mean_logps)
    source = draw(st.lists(st.floats(-30.0, 0.0), min_size=len(receiver), max_size=len(receiver)))
    return np.array(receiver), np.array(source)


@SETTINGS
@given(logps=logp_pairs(), delta=deltas)
def test_weights_are_zero_or_above_the_floor_and_at_most_one(
    logps: tuple[np.ndarray, np.ndarray], delta: float
) -> None:
    weights = compatibility_weights(compatibility_scores(*logps), delta)
    kept = weights > 0
    assert np.all(weights[~kept] == 0.0)
    assert np.all((weights[kept] > delta) & (weights[kept] <= 1.0))


@SETTINGS
@given(logps=logp_pairs(), delta=deltas)
def test_weight_is_zero_exactly_when_the_score_is_at_most_the_floor(
    logps: tuple[np.ndarray, np.ndarray], delta: float
) -> None:
    scores = compatibility_scores(*logps)
    weights = compatibility_weights(compatibility_scores(*logps), delta)
    np.testing.assert_array_equal(weights == 0, scores <= delta)
    np.testing.assert_array_equal(weights[scores > delta], np.minimum(scores, 1)[scores > delta])


@SETTINGS
@given(source=st.floats(-30.0, 0.0), gap=st.floats(1e-6, 20.0))
def test_a_score_exactly_at_the_floor_is_removed(source: float, gap: float) -> None:
    receiver = source - gap
    score = float(compatibility_scores([receiver], [source])[0])
    assert 0.0 < score < 1.0
    assert compatibility_weights([score], score).tolist() == [0.0]


@SETTINGS
@given(logp=mean_logps, delta=deltas)
def test_same_model_gets_full_weight(logp: list[float], delta: float) -> None:
    assert np.all(compatibility_weights(compatibility_scores(logp, logp), delta) == 1.0)


@SETTINGS
@given(logps=logp_pairs())
def test_zero_floor_gives_the_capped_score(logps: tuple[np.ndarray, np.ndarray]) -> None:
    receiver, source = logps
    np.testing.assert_allclose(
        compatibility_weights(compatibility_scores(receiver, source), 0.0),
        np.minimum(np.exp(receiver - source), 1.0),
        rtol=1e-12,
    )


def test_worked_scores_and_weights() -> None:
    # s = exp(l_R - l_S): 1/e ≈ 0.37 is under the paper's floor 0.8, e is capped at 1,
    # exp(-0.1) ≈ 0.905 passes unchanged.
    receiver = [-2.0, -1.0, -1.1]
    source = [-1.0, -2.0, -1.0]
    np.testing.assert_allclose(
        compatibility_scores(receiver, source), [math.exp(-1), math.e, math.exp(-0.1)]
    )
    np.testing.assert_allclose(
        compatibility_weights(compatibility_scores(receiver, source), 0.8),
        [0.0, 1.0, math.exp(-0.1)],
    )


def test_zero_floor_admits_every_response_even_one_whose_score_underflows() -> None:
    receiver, source = [-1000.0, -1.0, -2.0], [0.0, -1.0, -1.0]  # s = 0.0 (underflow), 1, 1/e
    assert compatibility_scores(receiver, source)[0] == 0.0
    weights = compatibility_weights(compatibility_scores(receiver, source), 0.0)
    assert 0.0 < weights[0] < 1e-300  # kept: min(s, 1) of the true s > 0, not "removed"
    np.testing.assert_allclose(weights[1:], [1.0, math.exp(-1)])
    assert (
        compatibility_weights(compatibility_scores(receiver, source), 0.5).tolist()[0] == 0.0
    )  # a real floor removes
    np.testing.assert_array_equal(admitted_by_floor([0.0, 0.5, 0.9], 0.0), [True, True, True])
    np.testing.assert_array_equal(admitted_by_floor([0.0, 0.8, 0.9], 0.8), [False, False, True])
    admitted = random_admission([0.0, 0.0, 2.0], 3, np.random.default_rng(0))
    assert (admitted > 0).all() and admitted[2] == 1.0


def test_huge_log_likelihood_gap_gives_weight_one_without_warning() -> None:
    with np.errstate(all="raise"):
        assert compatibility_weights(compatibility_scores([0.0], [-1000.0]), 0.8).tolist() == [1.0]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: compatibility_scores([0.0, -1.0], [0.0]), "shape \\(2,\\) but source_mean_logp"),
        (lambda: compatibility_scores([float("nan")], [0.0]), "receiver_mean_logp\\[0\\] = nan"),
        (
            lambda: compatibility_weights(compatibility_scores([0.0], [0.0]), 1.0),
            "delta must be in \\[0, 1\\)",
        ),
        (
            lambda: compatibility_weights(compatibility_scores([0.0], [0.0]), -0.1),
            "delta must be in \\[0, 1\\)",
        ),
        (lambda: normalised_loglik([], "abc"), "token_logprobs is empty"),
        (lambda: normalised_loglik([-1.0], "", mode="char"), "text is empty"),
        (lambda: normalised_loglik([-1.0], "a", mode="word"), "mode must be one of"),
        (lambda: normalised_loglik([[-1.0]], "a"), "must be 1-D"),
        (lambda: normalised_loglik([-math.inf], "a"), "token_logprobs\\[0\\] = -inf"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_normalised_loglik_modes() -> None:
    logprobs = [-1.0, -2.0, -3.0]
    assert normalised_loglik(logprobs, "ignored") == pytest.approx(-2.0)
    assert normalised_loglik(logprobs, "abcdef", mode="char") == pytest.approx(-1.0)


def test_char_mode_is_neutral_to_how_finely_the_text_was_cut() -> None:
    # The same text and total log-likelihood, cut into 2 or into 6 tokens.
    coarse, fine = [-3.0, -3.0], [-1.0] * 6
    assert normalised_loglik(coarse, "x" * 12) == pytest.approx(-3.0)
    assert normalised_loglik(fine, "x" * 12) == pytest.approx(-1.0)
    assert normalised_loglik(coarse, "x" * 12, mode="char") == normalised_loglik(
        fine, "x" * 12, mode="char"
    )


@SETTINGS
@given(
    scores=st.lists(st.floats(1e-3, 5.0), min_size=1, max_size=20),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_admission_admits_exactly_count_with_capped_scores(
    scores: list[float], data: st.DataObject, seed: int
) -> None:
    values = np.array(scores).reshape(-1, 1)
    count = data.draw(st.integers(0, values.size))
    weights = random_admission(values, count, np.random.default_rng(seed))
    assert weights.shape == values.shape
    admitted = weights > 0
    assert admitted.sum() == count
    np.testing.assert_array_equal(weights[admitted], np.minimum(values[admitted], 1.0))


@SETTINGS
@given(
    shape=st.tuples(st.integers(1, 4), st.integers(1, 6)),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_admission_over_a_directions_groups_is_exact_and_reproducible(
    shape: tuple[int, int], data: st.DataObject, seed: int
) -> None:
    size = shape[0] * shape[1]
    values = np.array(
        data.draw(st.lists(st.floats(0.0, 5.0), min_size=size, max_size=size))
    ).reshape(shape)
    count = data.draw(st.integers(0, size))
    weights = random_admission(values, count, np.random.default_rng(seed))
    np.testing.assert_array_equal(
        weights, random_admission(values, count, np.random.default_rng(seed))
    )
    admitted = weights > 0
    assert weights.shape == shape and admitted.sum() == count
    np.testing.assert_array_equal(weights[admitted], admitted_weights(values[admitted]))


def test_random_admission_over_a_direction_can_pick_any_response() -> None:
    # Two groups of 4, 6 admitted: every response with probability 6/8, and a group may
    # get 2, 3 or 4 of them, not a fixed per-group share.
    rng = np.random.default_rng(2)
    scores = np.array([[0.1, 0.5, 0.9, 2.0], [1.0, 1.0, 0.3, 0.0]])
    draws = np.array([random_admission(scores, 6, rng) > 0 for _ in range(4000)])
    np.testing.assert_allclose(draws.mean(axis=0), 0.75, atol=0.03)
    assert set(draws[:, 0].sum(axis=1).tolist()) == {2, 3, 4}


def test_random_admission_ignores_the_floor_and_is_uniform() -> None:
    rng = np.random.default_rng(0)
    scores = np.array([0.05, 0.5, 0.95, 3.0])
    hits = sum((random_admission(scores, 2, rng) > 0).astype(int) for _ in range(4000))
    np.testing.assert_allclose(hits / 4000, 0.5, atol=0.03)
    with pytest.raises(ValueError, match="count=5 exceeds the 4 scored responses"):
        random_admission(scores, 5, rng)
    with pytest.raises(ValueError, match=r"scores\[1\] = -1\.0"):
        random_admission([0.5, -1.0], 1, rng)
