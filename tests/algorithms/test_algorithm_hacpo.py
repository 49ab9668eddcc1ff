"""HACPO strategy: capability-aware advantages, weights and sequence-level IS (arXiv 2603.02604)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import algorithms
from algorithms.testing import GEN_LOGP, N, TextScorer, make_rollouts, run_exchange


def hacpo_advantages_by_hand(own: np.ndarray, peer: np.ndarray, omega_peer: float, eps=1e-6):
    """Eq.5-6 for one prompt, two agents, transcribed directly."""
    rewards = np.concatenate([own, peer])
    weighted = np.concatenate([own, omega_peer * peer])
    if np.all(rewards == rewards[0]):
        return np.zeros_like(rewards)
    baseline = weighted.mean()
    if baseline > 1.0:
        baseline = own.mean()
    return (rewards - baseline) / (rewards.std(ddof=1) + eps)


def test_every_prompt_and_response_moves_with_capability_weights() -> None:
    algo, rollouts, transfers, _ = run_exchange("hacpo", {"A": [0, 2, 4], "B": [3, 2, 0]})
    p_a, p_b = 6 / 12, 5 / 12
    assert algo.strategy.capabilities() == pytest.approx({"A": p_a, "B": p_b})
    assert [(g.source, g.prompt_index) for g in transfers["A"]] == [("B", 0), ("B", 1), ("B", 2)]
    for group in transfers["A"]:
        np.testing.assert_allclose(group.weights, np.full(N, p_b / p_a))
        for i, scored in enumerate(group.scored):
            source_mean = rollouts["B"].mean_logp(group.prompt_index, i)
            np.testing.assert_array_equal(
                scored.logprobs, np.full(len(scored.token_ids), source_mean)
            )
    omega = p_a / p_b
    for p in range(3):
        expected = hacpo_advantages_by_hand(
            rollouts["A"].rewards[p], rollouts["B"].rewards[p], omega
        )
        np.testing.assert_allclose(transfers["A"][p].advantages, expected[N:])
        own = algo.strategy.own_advantages("A", rollouts, transfers["A"])
        np.testing.assert_allclose(own[p], expected[:N])
    assert not algo.strategy.replaces_own_groups


def test_binary_guard_falls_back_to_the_learners_own_mean() -> None:
    algo, rollouts, transfers, _ = run_exchange("hacpo", {"A": [4, 4, 3], "B": [1, 0, 0]})
    assert algo.strategy.capability_ratio("B", "A") == pytest.approx(0.1)  # 1/11, clipped
    expected = hacpo_advantages_by_hand(rollouts["A"].rewards[0], rollouts["B"].rewards[0], 10.0)
    np.testing.assert_allclose(transfers["A"][0].advantages, expected[N:])
    assert (expected[:N] == 0).all()  # baseline = own mean = 1


def test_capability_is_a_rolling_window_of_success_rates() -> None:
    algo = algorithms.make("hacpo", n=N, capability_window=2)
    for ks in ([0, 0], [4, 4], [2, 2]):
        rollouts = {a: make_rollouts(a, ks) for a in ("A", "B")}
        algo.compute_advantages(rollouts)
        exchanged = algo.exchange(rollouts, ["A", "B"], TextScorer(), np.random.default_rng(0))
    assert algo.strategy.capabilities()["A"] == pytest.approx((1.0 + 0.5) / 2)
    assert exchanged.stats.extra["hacpo/capability/A"] == pytest.approx(0.75)


def test_peer_ratio_is_the_sequence_ratio_against_the_source_mean_and_clips_above_one() -> None:
    algo, rollouts, transfers, _ = run_exchange("hacpo", {"A": [0, 2, 4], "B": [3, 2, 0]})
    batch = algo.build_batches(rollouts, transfers, ["A"], np.random.default_rng(0))[0]["A"]
    peers = [s for s in batch.sequences if s.is_peer and s.advantage > 0]
    width = max(len(s.response_token_ids) for s in peers)

    def clipped_peer_tokens(log_ratio: float) -> float:
        new_logp = torch.zeros(len(peers), width, dtype=torch.float64)
        for j, s in enumerate(peers):
            new_logp[j, : len(s.response_token_ids)] = GEN_LOGP + log_ratio
        return algo.loss(new_logp, peers)[1]["clipped_peer"]

    assert clipped_peer_tokens(np.log(0.9)) == 0  # inside the one-sided range [0.8, 1]
    assert clipped_peer_tokens(np.log(1.1)) == sum(len(s.response_token_ids) for s in peers)


def step(algo, ks: dict[str, list[int]]):
    rollouts = {a: make_rollouts(a, k) for a, k in ks.items()}
    algo.compute_advantages(rollouts)
    return algo.exchange(rollouts, list(ks), TextScorer(), np.random.default_rng(0)).transfers


def test_the_capability_window_survives_a_restart_through_state_dict() -> None:
    first, second, third = (
        {"A": [0, 0], "B": [4, 4]},
        {"A": [4, 4], "B": [1, 1]},
        {
            "A": [0, 2],
            "B": [3, 0],
        },
    )
    algo = algorithms.make("hacpo", n=N, capability_window=3)
    step(algo, first)
    step(algo, second)
    saved = json.loads(json.dumps(algo.strategy.state_dict()))  # as the checkpoint stores it
    restored, fresh = (algorithms.make("hacpo", n=N, capability_window=3) for _ in range(2))
    restored.strategy.load_state_dict(saved)
    expected = step(algo, third)
    for other, same in ((restored, True), (fresh, False)):
        got = step(other, third)
        equal = all(
            np.array_equal(g.weights, e.weights) and np.array_equal(g.advantages, e.advantages)
            for r in expected
            for g, e in zip(got[r], expected[r], strict=True)
        )
        assert equal == same
    assert restored.strategy.capabilities() == algo.strategy.capabilities()


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({}, r"hacpo state must be \{'success_history'"),
        ({"success_history": {"A": [0.5] * 4}}, "at most 3 rates"),
        ({"success_history": {"A": 0.5}}, "at most 3 rates"),
        ({"success_history": {}, "extra": 1}, r"hacpo state must be \{'success_history'"),
        ({"success_history": {"A": [0.5, None]}}, r"success_history\['A'\]\[1\] = None"),
        ({"success_history": {"A": [float("nan")]}}, r"success_history\['A'\]\[0\] = nan"),
        ({"success_history": {"A": [1.5]}}, r"success_history\['A'\]\[0\] = 1.5"),
        ({"success_history": {"A": ["0.5"]}}, r"success_history\['A'\]\[0\] = '0.5'"),
        ({"success_history": {"A": [True]}}, r"success_history\['A'\]\[0\] = True"),
    ],
)
def test_a_hacpo_state_that_does_not_fit_is_refused(state, message) -> None:
    strategy = algorithms.make("hacpo", n=N, capability_window=3).strategy
    with pytest.raises(ValueError, match=message):
        strategy.load_state_dict(state)


@pytest.mark.parametrize("name", ["grpo", "graft", "sgt"])
def test_stateless_strategies_save_nothing_and_refuse_a_state(name) -> None:
    strategy = algorithms.make(name).strategy
    assert strategy.state_dict() == {}
    strategy.load_state_dict({})
    with pytest.raises(ValueError, match=f"strategy '{name.replace('grpo', 'none')}' keeps no"):
        strategy.load_state_dict({"success_history": {}})
