"""Algorithm.build_batches: own groups, replacements, removals, ordering (GRAFT-SPEC §3-§5)."""

from __future__ import annotations

import numpy as np
import pytest

import algorithms
from algorithms.testing import PAIR, N, TextScorer, make_rollouts, run_exchange


def build(name: str, agents=PAIR, scorer=None, seed=0, **options):
    algo, rollouts, transfers, _ = run_exchange(name, agents, scorer, seed=seed, **options)
    batches, counts = algo.build_batches(
        rollouts, transfers, list(transfers), np.random.default_rng(seed)
    )
    return algo, rollouts, transfers, batches, counts


def minibatches_holding(batch) -> dict[int, set[int]]:
    """Prompt -> indices of the minibatches holding any of its rows."""
    held: dict[int, set[int]] = {}
    for i, minibatch in enumerate(batch.minibatches):
        for j in minibatch:
            held.setdefault(batch.sequences[j].prompt_index, set()).add(i)
    return held


def summary(batch) -> list[tuple]:
    """Comparable view of a batch: every sequence's fields, and the minibatches."""
    rows = [
        (
            s.prompt_index,
            tuple(s.response_token_ids),
            tuple(s.old_logprobs),
            s.advantage,
            s.weight,
            s.is_peer,
            s.source,
            s.clip,
            s.policy_gradient,
            s.nll,
        )
        for s in batch.sequences
    ]
    return [rows, batch.minibatches, batch.prompts]


def test_without_transfers_graft_builds_exactly_the_grpo_batch() -> None:
    no_overlap = {"A": [1, 2, 0], "B": [0, 3, 4]}  # no receiver all-fail with an informative peer
    _, _, transfers, graft, _ = build("graft", no_overlap)
    _, _, _, grpo, _ = build("grpo", no_overlap)
    assert transfers == {"A": [], "B": []}
    for agent in no_overlap:
        assert summary(graft[agent]) == summary(grpo[agent])


def test_grpo_batch_holds_every_own_response_in_near_equal_minibatches() -> None:
    _, rollouts, _, batches, batch_counts = build("grpo")
    batch = batches["A"]
    assert len(batch.sequences) == len(PAIR["A"]) * N
    sizes = [len(mb) for mb in batch.minibatches]
    assert sorted(j for mb in batch.minibatches for j in mb) == list(range(len(batch.sequences)))
    assert len(sizes) == 4 and max(sizes) - min(sizes) <= N  # whole groups, 7 over 4 chunks
    first = batch.sequences[N + 1]
    assert first.prompt_index == 1 and first.advantage == rollouts["A"].advantages[1, 1]
    assert first.response_token_ids == rollouts["A"].token_ids[1][1]
    assert batch_counts["A"]["own_groups"] == len(PAIR["A"])


def test_transferred_groups_replace_own_groups_and_run_last() -> None:
    _, rollouts, transfers, batches, batch_counts = build("graft")
    batch = batches["A"]
    own_prompts = {s.prompt_index for s in batch.sequences if not s.is_peer}
    assert own_prompts == {1, 3, 4, 5, 6}  # 0 and 2 were replaced by B's groups
    peers = [s for s in batch.sequences if s.is_peer]
    assert [(s.prompt_index, s.source) for s in peers] == [(0, "B")] * N + [(2, "B")] * N
    group = transfers["A"][0]
    assert peers[1].old_logprobs.tolist() == group.scored[1].logprobs.tolist()
    assert peers[1].response_token_ids == group.scored[1].token_ids
    assert peers[1].advantage == rollouts["B"].advantages[0, 1]
    order = [j for mb in batch.minibatches for j in mb]
    first_peer = min(order.index(j) for j, s in enumerate(batch.sequences) if s.is_peer)
    assert all(batch.sequences[j].is_peer for j in order[first_peer:])
    assert batch_counts["A"]["replaced_groups"] == 2


def test_peer_first_runs_transferred_groups_first() -> None:
    _, _, _, batches, _ = build("graft-peer-first")
    batch = batches["A"]
    order = [j for mb in batch.minibatches for j in mb]
    assert all(batch.sequences[j].is_peer for j in order[: 2 * N])


def test_random_order_follows_the_seed() -> None:
    first = build("graft-peer-random", seed=4)[3]["A"].minibatches
    assert first == build("graft-peer-random", seed=4)[3]["A"].minibatches
    assert any(build("graft-peer-random", seed=s)[3]["A"].minibatches != first for s in range(5))


def test_removed_responses_are_absent_and_counted() -> None:
    texts = make_rollouts("B", PAIR["B"]).texts[0]
    scorer = TextScorer({texts[0]: -2.0, texts[3]: -0.9})
    _, _, _, batches, batch_counts = build("graft", scorer=scorer)
    peers = [s for s in batches["A"].sequences if s.is_peer and s.prompt_index == 0]
    assert len(peers) == N - 1
    assert [s.weight for s in peers] == pytest.approx([1.0, 1.0, 1.0])
    assert batch_counts["A"]["removed_peer_responses"] == 1


def test_clip_flags_follow_the_config() -> None:
    _, _, _, graft, _ = build("graft")
    _, _, _, no_clip, _ = build("graft-no-clip")
    _, _, _, everywhere, _ = build("graft-no-clip", clip_own=False)
    for batches, own_clip, peer_clip in (
        (graft, True, True),
        (no_clip, True, False),
        (everywhere, False, False),
    ):
        assert {s.clip for s in batches["A"].sequences if not s.is_peer} == {own_clip}
        assert {s.clip for s in batches["A"].sequences if s.is_peer} == {peer_clip}


def test_pooled_keeps_the_own_group_with_pooled_advantages_in_one_minibatch() -> None:
    _, _, _, batches, batch_counts = build("graft-pooled")
    batch = batches["A"]
    # Prompt 0 pools A's rewards [0, 0, 0, 0] with B's [1, 1, 1, 0]: mean 3/8, sample std
    # sqrt(15/56), so a failure gets -(3/8) / sqrt(15/56) = -3/sqrt(120/7) and a success
    # 5/sqrt(120/7) (eps = 1e-6 is negligible).
    scale = np.sqrt(120 / 7)
    pooled_0 = [s for s in batch.sequences if s.prompt_index == 0]
    own = [s.advantage for s in pooled_0 if not s.is_peer]
    peer = [s.advantage for s in pooled_0 if s.is_peer]
    assert own == pytest.approx([-3 / scale] * N, rel=1e-5)
    assert peer == pytest.approx([5 / scale] * 3 + [-3 / scale], rel=1e-5)
    assert batch_counts["A"]["replaced_groups"] == 0
    assert all(len(held) == 1 for held in minibatches_holding(batch).values())
    assert len(pooled_0) == 2 * N  # so each pooled 2n group sits in one minibatch
    pooled_in_order = [
        batch.sequences[j].prompt_index in (0, 2) for mb in batch.minibatches for j in mb
    ]
    assert pooled_in_order == sorted(pooled_in_order)  # peer-last: pooled prompts after the rest
    assert all(type(j) is int for mb in batch.minibatches for j in mb)


def test_dynamic_sampling_drops_uninformative_groups_and_counts_them() -> None:
    _, _, _, batches, batch_counts = build("grpo-dynamic")
    assert {s.prompt_index for s in batches["A"].sequences} == {4}
    assert batch_counts["A"]["dynamic_dropped_groups"] == len(PAIR["A"]) - 1


def test_sgt_adds_nll_only_rows_and_keeps_own_groups() -> None:
    _, _, _, batches, _ = build("sgt")
    batch = batches["A"]
    assert {s.prompt_index for s in batch.sequences if not s.is_peer} == set(range(len(PAIR["A"])))
    peers = [s for s in batch.sequences if s.is_peer]
    assert len(peers) == 3 and all(s.nll and not s.policy_gradient for s in peers)


@pytest.mark.parametrize("name", sorted(set(algorithms.available()) - {"hacpo"}))
def test_every_row_of_a_prompt_trains_in_one_minibatch(name: str) -> None:
    receivers = ["A"] if name == "graft-stored" else None
    _, _, _, batches, _ = build(name, receivers=receivers)
    for batch in batches.values():
        assert all(len(held) == 1 for held in minibatches_holding(batch).values()), batch.agent


# 16 prompts: A fails the first 10, which B solves 2/4 times, so A gets 10 SGT picks.
SIXTEEN = {"A": [0] * 10 + [2] * 6, "B": [2] * 10 + [0] * 6}


@pytest.mark.parametrize("order", ["peer_last", "peer_first", "random"])
def test_sgt_chunks_and_orders_own_groups_exactly_as_grpo(order: str) -> None:
    _, _, transfers, sgt, _ = build("sgt", SIXTEEN, seed=3, order=order)
    _, _, _, grpo, _ = build("grpo", SIXTEEN, seed=3, order=order)
    assert len(transfers["A"]) == 10

    def own_rows(batch) -> list[list[tuple]]:
        return [
            [
                (s.prompt_index, tuple(s.response_token_ids), s.advantage)
                for s in rows
                if not s.is_peer
            ]
            for rows in ([batch.sequences[j] for j in mb] for mb in batch.minibatches)
        ]

    assert own_rows(sgt["A"]) == own_rows(grpo["A"])
    picks_per_minibatch = [
        sum(sgt["A"].sequences[j].nll for j in mb) for mb in sgt["A"].minibatches
    ]
    assert sum(picks_per_minibatch) == 10 and sum(n > 0 for n in picks_per_minibatch) > 1


def test_hacpo_runs_every_own_row_before_any_peer_row() -> None:
    _, _, _, batches, _ = build("hacpo")
    order = [batches["A"].sequences[j].is_peer for mb in batches["A"].minibatches for j in mb]
    assert order == sorted(order) and any(order)


def test_a_fully_removed_transferred_group_leaves_its_prompt_out_and_is_counted() -> None:
    texts = make_rollouts("B", PAIR["B"]).texts[0]
    scorer = TextScorer({text: -3.0 for text in texts})  # s = e^-2 < 0.8 on all of prompt 0
    _, _, _, batches, batch_counts = build("graft", scorer=scorer)
    assert 0 not in {s.prompt_index for s in batches["A"].sequences}
    counts = batch_counts["A"]
    assert counts["fully_removed_groups"] == 1 and counts["removed_peer_responses"] == N
    assert counts["replaced_groups"] == 2 and counts["own_groups"] == len(PAIR["A"]) - 2


def test_build_batches_rejects_missing_receivers_and_broken_groups() -> None:
    algo, rollouts, transfers, _ = run_exchange("graft", PAIR)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="no entry for receivers"):
        algo.build_batches(rollouts, {"A": transfers["A"]}, ["A", "B"], rng)
    transfers["A"][0].weights = np.ones(N - 1)
    with pytest.raises(ValueError, match="inconsistent lengths"):
        algo.build_batches(rollouts, transfers, ["A", "B"], rng)
