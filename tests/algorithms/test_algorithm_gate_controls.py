"""GRAFT's per-response controls through the exchange: floor, random admission, success-only.

Each test is built so that a plausible wrong implementation fails it: a random
admission that is really the floor, advantages re-normalised over the responses
left after removal, and a zero floor that drops responses whose score underflows.
"""

from __future__ import annotations

import numpy as np
import torch

from algorithms.testing import GEN_LOGP, PAIR, TextScorer, make_rollouts, run_exchange

DELTA = 0.8


def low_score_scorer() -> TextScorer:
    """B's group on prompt 0: s = e^-1.5, e^-1, 1, 1, so the floor admits the last two."""
    texts = make_rollouts("B", PAIR["B"]).texts[0]
    return TextScorer({texts[0]: GEN_LOGP - 1.5, texts[1]: GEN_LOGP - 1.0})


def test_random_admission_matches_the_floors_count_over_the_whole_direction() -> None:
    # B->A moves prompts 0 and 2; the floor admits 2 + 4 of their 8 responses, so the
    # control admits 6 of the 8 (App. F, "separately in each direction"), not 2 + 4.
    seeds = 400
    hits = np.zeros((2, 4))
    for seed in range(seeds):
        _, _, transfers, exchange_stats = run_exchange(
            "graft-random-admission", PAIR, low_score_scorer(), seed
        )
        admitted = np.array([group.weights > 0 for group in transfers["A"]])
        assert admitted.sum() == 6 == exchange_stats.directions[("B", "A")].admitted
        hits += admitted
    # Uniform over the direction: each response is admitted with probability 6/8.
    np.testing.assert_allclose(hits / seeds, 0.75, atol=0.1)


def test_random_admission_per_group_sometimes_admits_responses_below_the_floor() -> None:
    scores = np.exp([-1.5, -1.0, 0.0, 0.0])
    below_floor_admitted = 0
    for seed in range(8):
        _, _, transfers, _ = run_exchange(
            "graft-random-admission", PAIR, low_score_scorer(), seed, admission_match="group"
        )
        weights = transfers["A"][0].weights
        assert np.count_nonzero(weights) == 2  # as many as the floor admits in this group
        admitted = weights > 0
        np.testing.assert_allclose(weights[admitted], np.minimum(scores, 1.0)[admitted])
        below_floor_admitted += int(np.count_nonzero(admitted & (scores <= DELTA)))
    # Each seed admits 2 of 4 uniformly; P(never one of the two low ones in 8 draws) = 6^-8.
    assert below_floor_admitted > 0


def test_transferred_advantages_stay_the_full_source_group_values_after_removal() -> None:
    # B's prompt 0 has rewards [1, 1, 1, 0]: sample std sqrt((3/16 + 9/16) / 3) = 1/2, so
    # advantages (1 - 3/4) / (1/2) = 1/2 and -3/2, whatever is removed afterwards.
    full_group = np.array([1, 1, 1, -3]) / 2
    for name, scorer, removed in (
        ("graft", low_score_scorer(), [True, True, False, False]),  # two under the floor
        ("graft-success-only", TextScorer(), [False, False, False, True]),  # the failure
        ("graft-success-only", low_score_scorer(), [True, True, False, True]),  # both
    ):
        _, rollouts, transfers, _ = run_exchange(name, PAIR, scorer)
        group = transfers["A"][0]
        np.testing.assert_array_equal(group.weights == 0, removed)
        np.testing.assert_allclose(group.advantages, full_group, rtol=1e-5)
        np.testing.assert_array_equal(group.advantages, rollouts["B"].advantages[0])


def test_zero_floor_keeps_a_response_whose_score_underflows_to_zero() -> None:
    texts = make_rollouts("B", PAIR["B"]).texts[0]
    scorer = TextScorer({texts[0]: -1000.0})  # s = exp(-999) is 0.0 in float64
    algo, rollouts, transfers, exchange_stats = run_exchange("graft-no-floor", PAIR, scorer)
    group = transfers["A"][0]
    assert exchange_stats.directions[("B", "A")].scores[0] == 0.0
    assert 0.0 < group.weights[0] < 1e-300 and (group.weights[1:] == 1.0).all()
    batches, counts = algo.build_batches(rollouts, transfers, ["A"], np.random.default_rng(0))
    batch = batches["A"]
    peer_rows = [s for s in batch.sequences if s.is_peer and s.prompt_index == 0]
    assert len(peer_rows) == 4 and counts["A"]["removed_peer_responses"] == 0
    # In float32 the weight rounds to 0, but the row's tokens stay in the denominator.
    width = max(len(s.response_token_ids) for s in peer_rows)
    new_logp = torch.zeros(len(peer_rows), width, dtype=torch.float32)
    for j, row in enumerate(peer_rows):
        new_logp[j, : len(row.old_logprobs)] = torch.as_tensor(row.old_logprobs)
    _, stats = algo.loss(new_logp, peer_rows)
    assert stats["pg_tokens"] == sum(len(s.response_token_ids) for s in peer_rows)
    # graft keeps the floor: the same response is removed there.
    _, _, floored, _ = run_exchange("graft", PAIR, scorer)
    assert floored["A"][0].weights[0] == 0.0


def test_random_admission_with_zero_floor_draws_from_every_response() -> None:
    texts = make_rollouts("B", PAIR["B"]).texts[0]
    scorer = TextScorer({text: -1000.0 for text in texts})  # every s underflows to 0.0
    _, _, transfers, _ = run_exchange("graft-random-admission", PAIR, scorer, delta=0.0)
    weights = transfers["A"][0].weights
    assert (weights > 0).all() and (weights < 1e-300).all()
