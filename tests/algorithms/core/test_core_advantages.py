"""Group advantages (Eq.1): properties over random reward tables, plus worked values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from algorithms.core import group_advantages

# Rewards on a quarter grid keep sums exact, so the 1e-9 tolerances measure the
# function, not float noise in the test data.
reward_tables = st.tuples(st.integers(1, 8), st.integers(1, 16)).flatmap(
    lambda shape: arrays(np.float64, shape, elements=st.integers(-8, 8).map(lambda x: x / 4))
)
scales = st.sampled_from(["std", "none"])


@settings(max_examples=100, deadline=None)
@given(rewards=reward_tables, scale=scales)
def test_every_group_sums_to_zero(rewards: np.ndarray, scale: str) -> None:
    advantages = group_advantages(rewards, scale=scale)
    assert advantages.shape == rewards.shape
    np.testing.assert_allclose(advantages.sum(axis=1), 0.0, atol=1e-9)


@settings(max_examples=100, deadline=None)
@given(rewards=reward_tables, scale=scales)
def test_constant_groups_are_exactly_zero(rewards: np.ndarray, scale: str) -> None:
    rewards[0] = rewards[0, 0]
    advantages = group_advantages(rewards, scale=scale)
    assert np.all(advantages[0] == 0.0)
    varied = rewards.max(axis=1) > rewards.min(axis=1)
    assert np.all(np.abs(advantages[varied]).max(axis=1) > 0)


@settings(max_examples=100, deadline=None)
@given(value=st.floats(-1e3, 1e3), prompts=st.integers(1, 4), n=st.integers(1, 16), scale=scales)
def test_constant_groups_of_any_float_are_exactly_zero(
    value: float, prompts: int, n: int, scale: str
) -> None:
    # The mean of n copies of a float need not equal it (e.g. 0.1 * 3 / 3), so a
    # naive (r - mean) / (std + eps) would leave residue of order 1e-17 / 1e-6.
    assert np.all(group_advantages(np.full((prompts, n), value), scale=scale) == 0.0)


def test_constant_group_with_an_inexact_mean_is_exactly_zero() -> None:
    rewards = np.full((1, 3), 0.1)
    assert rewards.mean() != 0.1  # the residue the function must not pass on
    assert np.all(group_advantages(rewards) == 0.0)


@settings(max_examples=100, deadline=None)
@given(rewards=reward_tables, shift=st.integers(-4000, 4000).map(lambda x: x / 4), scale=scales)
def test_adding_a_constant_changes_nothing(rewards: np.ndarray, shift: float, scale: str) -> None:
    np.testing.assert_allclose(
        group_advantages(rewards + shift, scale=scale),
        group_advantages(rewards, scale=scale),
        rtol=0,
        atol=1e-9,
    )


@settings(max_examples=100, deadline=None)
@given(rewards=reward_tables, ddof=st.sampled_from([0, 1]))
def test_std_scale_divides_the_centred_rewards_by_std_plus_eps(
    rewards: np.ndarray, ddof: int
) -> None:
    assume(rewards.shape[1] > ddof)
    centred = group_advantages(rewards, scale="none")
    scaled = group_advantages(rewards, scale="std", eps=1e-6, ddof=ddof)
    std = rewards.std(axis=1, ddof=ddof, keepdims=True)
    np.testing.assert_allclose(scaled * (std + 1e-6), centred)


@settings(max_examples=100, deadline=None)
@given(rewards=reward_tables)
def test_the_default_is_the_sample_std_as_in_verl(rewards: np.ndarray) -> None:
    # verl's compute_grpo_outcome_advantage, which the paper trained with, uses torch.std:
    # the Bessel-corrected sample std.
    assume(rewards.shape[1] > 1)
    varied = rewards.max(axis=1, keepdims=True) > rewards.min(axis=1, keepdims=True)
    mean, std = rewards.mean(axis=1, keepdims=True), rewards.std(axis=1, ddof=1, keepdims=True)
    expected = np.where(varied, (rewards - mean) / (std + 1e-6), 0.0)
    np.testing.assert_allclose(group_advantages(rewards), expected, rtol=1e-12, atol=1e-12)


def test_population_std_advantages_are_sqrt_n_over_n_minus_1_larger_at_n_8() -> None:
    rewards = np.array([[1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 1]], dtype=float)
    ratio = group_advantages(rewards, ddof=0, eps=0) / group_advantages(rewards, eps=0)
    np.testing.assert_allclose(ratio, math.sqrt(8 / 7), rtol=1e-12)  # 1.069x


def test_worked_binary_group_matches_eq1() -> None:
    # Rewards [1, 0, 0, 0]: mean 0.25; squared deviations sum to 0.75, so the sample
    # std is sqrt(0.75 / 3) = 1/2.
    expected = [0.75 / (0.5 + 1e-6)] + [-0.25 / (0.5 + 1e-6)] * 3
    np.testing.assert_allclose(group_advantages([[1, 0, 0, 0]])[0], expected, rtol=1e-12)
    np.testing.assert_allclose(
        group_advantages([[1, 0, 0, 0]], scale="none")[0], [0.75] + [-0.25] * 3
    )


def test_ddof_zero_uses_the_population_std() -> None:
    std = math.sqrt(3) / 4  # sqrt(0.75 / 4)
    np.testing.assert_allclose(
        group_advantages([[1, 0, 0, 0]], ddof=0, eps=0)[0, 0], 0.75 / std, rtol=1e-12
    )


@pytest.mark.parametrize(
    ("rewards", "options", "message"),
    [
        ([1.0, 0.0], {}, "must be \\[prompts, n\\]"),
        ([[1.0, float("nan")]], {}, "rewards\\[0, 1\\] = nan is not finite"),
        ([[1.0, 0.0]], {"scale": "mad"}, "scale must be one of"),
        (np.zeros((2, 0)), {}, "no responses per prompt"),
        ([[1.0, 0.0]], {"ddof": 2}, "ddof=2 needs groups larger than n=2"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(rewards, options, message) -> None:
    with pytest.raises(ValueError, match=message):
        group_advantages(rewards, **options)
