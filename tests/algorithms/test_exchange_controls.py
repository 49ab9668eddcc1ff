"""The peer controls (algorithms.exchange.controls): the shuffled-reward peer's permutation and
the twin peer's resampling, on hand-made rollouts (the loop's resampling: test_loop_controls)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import algorithms
from algorithms.core import group_advantages
from algorithms.exchange.controls import (
    TWIN_SUFFIX,
    permutation_seed,
    permuted_rewards,
    twin_draw,
    with_groups,
)
from algorithms.exchange.resample import ResamplingScorer
from algorithms.testing import PAIR, N, TextScorer, make_rollouts, rewards_with_k, run_exchange
from graft_env.types import AgentRollouts

rewards_lists = st.lists(st.sampled_from([0.0, 1.0, 0.5]), min_size=1, max_size=16)


@settings(max_examples=200, deadline=None)
@given(
    rewards_lists,
    st.integers(0, 2**32 - 1),
    st.sampled_from(["A", "B", "gap-d30-a"]),
    st.integers(0, 40),
)
def test_permutation_keeps_each_groups_reward_multiset(values, seed, receiver, prompt):
    rewards = np.array(values)
    root = np.random.SeedSequence(seed)
    permuted = permuted_rewards(rewards, permutation_seed(root, receiver, prompt))
    assert sorted(permuted) == sorted(rewards)
    again = permuted_rewards(rewards, permutation_seed(root, receiver, prompt))
    np.testing.assert_array_equal(permuted, again)  # reproducible from (seed, receiver, prompt)


def test_permutation_seeds_differ_by_receiver_and_prompt_and_leave_the_root_unspent():
    root = np.random.SeedSequence([7, 3, 2**31 - 1])
    before = np.random.default_rng(root).random(4)
    states = {
        tuple(permutation_seed(root, r, p).generate_state(2)) for r in ("A", "B") for p in range(3)
    }
    assert len(states) == 6
    np.testing.assert_array_equal(np.random.default_rng(root).random(4), before)


def test_shuffled_peer_is_graft_with_permuted_rewards():
    graft = run_exchange("graft", PAIR, seed=3)
    shuffled = run_exchange("graft", PAIR, seed=3, exchange="graft-shuffled")
    _, _, transfers, stats = shuffled
    for receiver, groups in transfers.items():
        expected = graft[2][receiver]
        assert [(g.prompt_index, g.source) for g in groups] == [
            (g.prompt_index, g.source) for g in expected
        ]
        for group, same in zip(groups, expected, strict=True):
            np.testing.assert_array_equal(group.weights, same.weights)
            assert group.texts == same.texts  # the peer's traces move unchanged
            # the advantages are those of a permutation of the group's rewards
            assert sorted(group.advantages) == pytest.approx(sorted(same.advantages))
    moved = [
        stats.extra.get(f"exchange/{s}->{r}/graft-shuffled/rewards_moved", 0.0)
        for r in transfers
        for s in transfers
        if s != r
    ]
    assert sum(moved) > 0  # some labels moved (seed 3; a permutation may also keep them)


def test_shuffled_peer_draws_nothing_from_the_step_stream():
    rngs = []
    for name in ("graft", "graft-shuffled"):
        algo = algorithms.make("graft", n=N, exchange=name)
        rollouts = {agent: make_rollouts(agent, ks) for agent, ks in PAIR.items()}
        algo.compute_advantages(rollouts)
        rng = np.random.default_rng(np.random.SeedSequence([5, 1, 2**31 - 1]))
        algo.exchange(rollouts, list(rollouts), TextScorer(), rng)
        rngs.append(rng.random(3))
    np.testing.assert_array_equal(*rngs)


def test_with_groups_recomputes_advantages_only_where_it_replaces_a_group():
    own = make_rollouts("A", [0, 2, 0])
    own.advantages = group_advantages(own.rewards)
    other = make_rollouts("A", [1, 3])
    view = with_groups(own, {2: (other, 1)}, lambda r: group_advantages(r[None, :])[0])
    np.testing.assert_array_equal(view.rewards[2], other.rewards[1])
    assert view.texts[2] == other.texts[1] and view.texts[1] == own.texts[1]
    assert view.logprobs[2] is other.logprobs[1]
    np.testing.assert_allclose(view.advantages[[0, 1]], own.advantages[[0, 1]])
    np.testing.assert_allclose(view.advantages[2], group_advantages(other.rewards[[1]])[0])
    assert own.rewards[2].sum() == 0  # the input is not changed


class ScriptedResample:
    """`resample` whose group on prompt p in round r has k = script(p, r) successes."""

    def __init__(self, script, n: int = N) -> None:
        self.script, self.n, self.calls = script, n, []

    def __call__(self, agent: str, prompts: Sequence[int], round_: int) -> AgentRollouts:
        self.calls.append((agent, list(prompts), round_))
        rollouts = make_rollouts(agent, [self.script(p, round_) for p in prompts], self.n)
        rollouts.texts = [[f"{t} round {round_}" for t in group] for group in rollouts.texts]
        return rollouts


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 9), max_size=6, unique=True),
    st.integers(0, 2**16),
    st.integers(1, 5),
)
def test_twin_draw_fills_prompts_with_their_first_informative_group(gated, salt, rounds):
    def script(p, r):
        return [0, 2, N, 1, 0][(p * 7 + r * 3 + salt) % 5]

    resample = ScriptedResample(script)
    draw = twin_draw("A", gated, resample, N, rounds)
    assert set(draw.groups) <= set(gated)
    for p, (extra, j) in draw.groups.items():
        assert 0 < extra.k[j] < N
        first = min(r for r in range(1, draw.rounds + 1) if 0 < script(p, r) < N)
        assert extra.texts[j][0].endswith(f"round {first}")
    assert draw.rounds <= rounds
    assert draw.drawn == N * sum(len(prompts) for _, prompts, _ in resample.calls)
    unfilled = set(gated) - set(draw.groups)
    assert not unfilled or draw.rounds == rounds  # stops early only once all are filled
    for _, prompts, _ in resample.calls:  # filled prompts are not asked again
        assert len(prompts) == len(set(prompts))


def twin_exchange(script, scorer=None):
    algo = algorithms.make("graft", n=N, exchange="graft-twin")
    rollouts = {agent: make_rollouts(agent, ks) for agent, ks in PAIR.items()}
    algo.compute_advantages(rollouts)
    resample = ScriptedResample(script)
    scorer = scorer or ResamplingScorer(TextScorer(), resample)
    exchanged = algo.exchange(rollouts, list(rollouts), scorer, np.random.default_rng(0))
    graft = run_exchange("graft", PAIR, seed=0)[2]
    return exchanged, graft, resample


def test_twin_fills_graft_gated_prompts_from_the_receiver_itself():
    # prompt 3 never becomes informative; the rest do in round 2
    exchanged, graft, resample = twin_exchange(lambda p, r: 0 if p == 3 or r < 2 else 1)
    stats = exchanged.stats
    for receiver, groups in exchanged.transfers.items():
        gated = sorted(g.prompt_index for g in graft[receiver])
        filled = sorted(p for p in gated if p != 3)
        assert sorted(g.prompt_index for g in groups) == filled
        assert all(g.source == receiver + TWIN_SUFFIX for g in groups)
        assert all(g.texts[0].startswith(f"{receiver} ") for g in groups)  # its own traces
        prefix = f"exchange/{receiver}{TWIN_SUFFIX}->{receiver}/graft-twin"
        assert stats.extra[f"{prefix}/gated_prompts"] == len(gated)
        assert stats.extra[f"{prefix}/filled_prompts"] == len(filled)
        peer = next(s for s in PAIR if s != receiver)
        assert stats.directions[(peer, receiver)].selected_prompts == []
        assert stats.directions[(peer, receiver)].transferred == 0
    assert any(call[2] == 2 for call in resample.calls)


def test_twin_needs_the_loops_resampling_scorer():
    with pytest.raises(ValueError, match="ResamplingScorer"):
        twin_exchange(lambda p, r: 1, scorer=TextScorer())


def test_twin_advantages_are_its_own_groups():
    exchanged, _, _ = twin_exchange(lambda p, r: 1)
    for groups in exchanged.transfers.values():
        for group in groups:
            expected = group_advantages(rewards_with_k([1]))[0]
            np.testing.assert_allclose(group.advantages, expected)
