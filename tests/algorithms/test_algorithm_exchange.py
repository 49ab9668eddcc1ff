"""Exchange strategies on hand-built rollouts (two and three agents, GRAFT-SPEC §2-§4, §7-§8).

The builders at the top are shared with the other tests in this folder
(`from test_algorithm_exchange import ...`). The scorer is a deterministic
function of the text, standing in for the receiver's real π_old re-scoring.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import algorithms
from algorithms.exchange import ExchangeResult, ExchangeStats, ExchangeStrategy, make_strategy
from algorithms.testing import (
    PAIR,
    N,
    TextScorer,
    make_rollouts,
    run_exchange,
)

# k per prompt. B->A candidates {0 (k_B=3), 1 (1), 2 (3)}; A->B candidates {4 (k_A=2)};
# m = 1, so B->A keeps its best (k_B=3) plus the tie: prompts 0 and 2.


def prompts_of(groups) -> list[tuple[str, int]]:
    return [(g.source, g.prompt_index) for g in groups]


def test_gate_selects_balanced_prompts_with_ties_and_keeps_source_advantages() -> None:
    _, rollouts, transfers, exchange_stats = run_exchange("graft", PAIR)
    assert prompts_of(transfers["A"]) == [("B", 0), ("B", 2)]
    assert prompts_of(transfers["B"]) == [("A", 4)]
    for group in transfers["A"]:
        np.testing.assert_array_equal(
            group.advantages, rollouts["B"].advantages[group.prompt_index]
        )
        assert group.texts == rollouts["B"].texts[group.prompt_index]
        np.testing.assert_array_equal(group.weights, np.ones(N))  # scorer agrees: s = 1
    stats = exchange_stats.directions
    assert stats[("B", "A")].candidates == 3 and stats[("A", "B")].candidates == 1
    assert stats[("B", "A")].selected_prompts == [0, 2]
    assert stats[("B", "A")].admitted == 2 * N


def test_no_balance_transfers_every_candidate_with_the_papers_eligibility() -> None:
    # graft-no-balance keeps SGT's k_S >= 1 (App. G): A's all-pass prompt 5 moves to B too.
    _, _, transfers, exchange_stats = run_exchange("graft-no-balance", PAIR)
    assert prompts_of(transfers["A"]) == [("B", 0), ("B", 1), ("B", 2)]
    assert prompts_of(transfers["B"]) == [("A", 4), ("A", 5)]
    np.testing.assert_array_equal(transfers["B"][1].advantages, np.zeros(N))
    stats = exchange_stats.directions[("A", "B")]
    assert (stats.candidates, stats.gate_candidates, stats.transferred) == (2, 2, 2 * N)
    # Eq.4's informative rule without balancing leaves the all-pass group at home.
    _, _, informative, _ = run_exchange("graft-no-balance", PAIR, candidates="informative")
    assert prompts_of(informative["B"]) == [("A", 4)]
    assert prompts_of(informative["A"]) == prompts_of(transfers["A"])


def test_any_success_is_refused_with_balancing() -> None:
    with pytest.raises(ValueError, match=r"AlgorithmConfig\.candidates: 'any_success' must be"):
        algorithms.make("graft", candidates="any_success")


def test_compatibility_weights_remove_implausible_responses_but_keep_them_listed() -> None:
    texts = make_rollouts("B", PAIR["B"]).texts[0]
    scorer = TextScorer({texts[0]: -1.5, texts[1]: -1.1, texts[2]: -0.5})  # s = e^-.5, e^-.1, e^.5
    _, _, transfers, exchange_stats = run_exchange("graft", PAIR, scorer)
    group = transfers["A"][0]
    np.testing.assert_allclose(group.weights, [0.0, np.exp(-0.1), 1.0, 1.0])
    assert len(group.scored) == N
    direction = exchange_stats.directions[("B", "A")]
    assert direction.removed_by_weight == 1 and direction.admitted == 2 * N - 1
    np.testing.assert_allclose(direction.scores[:3], np.exp([-0.5, -0.1, 0.5]))
    assert scorer.calls[0][:2] == ("A", [0] * N + [2] * N)


def test_no_floor_and_no_compat_change_only_the_weights() -> None:
    texts = make_rollouts("B", PAIR["B"]).texts[0]
    scorer = TextScorer({texts[0]: -1.5})
    _, _, no_floor, _ = run_exchange("graft-no-floor", PAIR, scorer)
    _, _, no_compat, _ = run_exchange("graft-no-compat", PAIR, scorer)
    assert no_floor["A"][0].weights[0] == pytest.approx(np.exp(-0.5))
    np.testing.assert_array_equal(no_compat["A"][0].weights, np.ones(N))


def test_success_only_gives_failed_source_responses_weight_zero_and_counts_them() -> None:
    _, rollouts, transfers, exchange_stats = run_exchange("graft-success-only", PAIR)
    for group in transfers["A"]:
        correct = rollouts["B"].rewards[group.prompt_index] > 0
        np.testing.assert_array_equal(group.weights, correct.astype(float))
    assert exchange_stats.directions[("B", "A")].removed_failures == 2  # 1 + 1 wrong


def test_pooled_advantages_are_over_both_groups() -> None:
    algo, rollouts, transfers, _ = run_exchange("graft-pooled", PAIR)
    group = transfers["A"][0]
    pooled = np.concatenate([rollouts["A"].rewards[0], rollouts["B"].rewards[0]])
    expected = (pooled - pooled.mean()) / (pooled.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(group.advantages, expected[N:])
    own = algo.strategy.own_advantages("A", rollouts, transfers["A"])
    np.testing.assert_allclose(own[0], expected[:N])
    assert (own[0] < 0).all()  # the receiver's failures now carry signal
    np.testing.assert_array_equal(own[3], rollouts["A"].advantages[3])  # untouched prompt


def test_random_prompts_keep_counts_draw_from_all_fail_prompts_and_follow_the_seed() -> None:
    _, rollouts, first, _ = run_exchange("graft-random-prompts", PAIR, seed=7)
    _, _, again, _ = run_exchange("graft-random-prompts", PAIR, seed=7)
    assert prompts_of(first["A"]) == prompts_of(again["A"])
    assert len(first["A"]) == 2 and len(first["B"]) == 1
    for receiver, groups in first.items():
        assert all(rollouts[receiver].k[g.prompt_index] == 0 for g in groups)
    drawn = {
        tuple(prompts_of(run_exchange("graft-random-prompts", PAIR, seed=s)[2]["A"]))
        for s in range(12)
    }
    assert len(drawn) > 1


def test_random_admission_admits_as_many_as_the_floor_at_random() -> None:
    texts = make_rollouts("B", PAIR["B"]).texts[0]
    scorer = TextScorer({texts[0]: -1.5, texts[1]: -1.1})  # floor admits 3 of 4, then 4 of 4
    _, _, first, _ = run_exchange("graft-random-admission", PAIR, scorer, seed=3)
    _, _, again, _ = run_exchange("graft-random-admission", PAIR, scorer, seed=3)
    weights = np.concatenate([group.weights for group in first["A"]])
    np.testing.assert_array_equal(weights, np.concatenate([g.weights for g in again["A"]]))
    assert np.count_nonzero(weights) == 7  # per direction B->A
    s = np.exp([-0.5, -0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    admitted = weights > 0
    np.testing.assert_allclose(weights[admitted], np.minimum(s, 1.0)[admitted])

    def admitted_per_group(seed: int, **options) -> tuple[int, ...]:
        transfers = run_exchange("graft-random-admission", PAIR, scorer, seed, **options)[2]
        return tuple(int(np.count_nonzero(g.weights)) for g in transfers["A"])

    # One draw of 7 over the direction's 8 responses leaves out one of either group's; a
    # per-group draw always admits the floor's 3 of group 0 and 4 of group 2.
    assert {admitted_per_group(seed) for seed in range(12)} == {(3, 4), (4, 3)}
    assert {admitted_per_group(seed, admission_match="group") for seed in range(12)} == {(3, 4)}


def test_stored_is_one_way_and_unbalanced() -> None:
    _, _, transfers, exchange_stats = run_exchange("graft-stored", PAIR, receivers=["A"])
    assert list(transfers) == ["A"]
    assert prompts_of(transfers["A"]) == [("B", 0), ("B", 1), ("B", 2)]
    assert list(exchange_stats.directions) == [("B", "A")]


# Receiver A: prompt 0 could come from B (k=3) or C (k=1): B wins; 1 from C; 2 from B.
# Proposals: A->B {3, 4}, B->A {0, 2}; A->C {4, 5}, C->A {1}; B->C {2}, C->B {1}.
# Pair (A, C) has m = 1 and A->C keeps both prompts because k_A ties at 3.
THREE = {"A": [0, 0, 0, 2, 3, 3, 0], "B": [3, 0, 2, 0, 0, 1, 0], "C": [1, 2, 0, 1, 0, 0, 0]}


def test_three_agents_take_the_best_informative_peer_then_balance_pairwise() -> None:
    _, rollouts, transfers, exchange_stats = run_exchange("graft", THREE)
    assert prompts_of(transfers["A"]) == [("B", 0), ("B", 2), ("C", 1)]
    assert prompts_of(transfers["B"]) == [("A", 3), ("A", 4), ("C", 1)]
    assert prompts_of(transfers["C"]) == [("A", 4), ("A", 5), ("B", 2)]
    np.testing.assert_array_equal(transfers["A"][2].advantages, rollouts["C"].advantages[1])
    # C_{C->A} = {0, 1} (C solved both 1..3 times), but B is A's best peer on 0: C proposed 1.
    direction = exchange_stats.directions[("C", "A")]
    assert (direction.gate_candidates, direction.candidates) == (2, 1)
    summary = exchange_stats.summary()
    assert summary["exchange/C->A/gate_candidates"] == 2.0
    assert summary["exchange/C->A/candidates"] == 1.0


# n = 4. Receiver A failed 0 and 1: on 0 C's informative group beats B's all-pass one, on 1
# B's all-pass group is the only success. B failed 3 (C: 3/4) and 4 (nobody). C failed 1
# (B: 4/4) and 2 (A and B both 4/4: the lower agent index, A).
ALL_PASS_THREE = {"A": [0, 0, 4, 2, 0], "B": [4, 4, 4, 0, 0], "C": [1, 0, 0, 3, 0]}


def test_any_success_with_three_agents_moves_all_pass_groups_only_without_a_better_peer() -> None:
    _, _, transfers, exchange_stats = run_exchange("graft-no-balance", ALL_PASS_THREE)
    assert prompts_of(transfers["A"]) == [("B", 1), ("C", 0)]
    assert prompts_of(transfers["B"]) == [("C", 3)]
    assert prompts_of(transfers["C"]) == [("A", 2), ("B", 1)]
    for group in (transfers["A"][0], *transfers["C"]):  # the all-pass groups
        np.testing.assert_array_equal(group.advantages, np.zeros(N))
        np.testing.assert_array_equal(group.weights, np.ones(N))
    direction = exchange_stats.directions[("B", "A")]
    assert (direction.gate_candidates, direction.candidates) == (2, 1)  # B's 0 went to C
    _, _, informative, _ = run_exchange(
        "graft-no-balance", ALL_PASS_THREE, candidates="informative"
    )
    assert prompts_of(informative["A"]) == [("C", 0)]
    assert prompts_of(informative["B"]) == [("C", 3)]
    assert informative["C"] == []


def test_random_prompts_with_three_agents_keep_counts_and_never_fill_a_prompt_twice() -> None:
    _, _, gate, _ = run_exchange("graft", THREE)
    counts = {r: Counter(g.source for g in groups) for r, groups in gate.items()}
    for seed in range(6):
        _, rollouts, transfers, _ = run_exchange("graft-random-prompts", THREE, seed=seed)
        for receiver, groups in transfers.items():
            assert Counter(g.source for g in groups) == counts[receiver]
            prompts = [g.prompt_index for g in groups]
            assert len(set(prompts)) == len(prompts)  # one source per prompt
            assert all(rollouts[receiver].k[p] == 0 for p in prompts)


@pytest.mark.parametrize("name", ["graft", "graft-random-prompts", "sgt", "hacpo"])
def test_a_single_agent_receives_nothing(name: str) -> None:
    algo, rollouts, alone, _ = run_exchange(name, {"A": [0, 1, 4]})
    assert alone == {"A": []}
    batch = algo.build_batches(rollouts, alone, ["A"], np.random.default_rng(0))[0]["A"]
    assert not any(s.is_peer for s in batch.sequences)


def test_none_strategy_transfers_nothing() -> None:
    _, _, grpo, _ = run_exchange("grpo", PAIR)
    assert grpo == {"A": [], "B": []}


def test_sgt_sends_one_correct_peer_response_per_all_fail_prompt() -> None:
    algo, rollouts, first, _ = run_exchange("sgt", PAIR, seed=5)
    _, _, again, _ = run_exchange("sgt", PAIR, seed=5)
    # A failed 0..3 and 6; B has a correct response on 0, 1, 2. B failed 3..6; A on 4, 5.
    assert prompts_of(first["A"]) == [("B", 0), ("B", 1), ("B", 2)]
    assert prompts_of(first["B"]) == [("A", 4), ("A", 5)]
    for group in first["A"] + first["B"]:
        (i,) = group.response_indices
        assert rollouts[group.source].rewards[group.prompt_index, i] == 1.0
        np.testing.assert_array_equal(group.weights, [1.0])
    assert [g.response_indices.tolist() for g in first["A"]] == [
        g.response_indices.tolist() for g in again["A"]
    ]
    assert not algo.strategy.replaces_own_groups


def test_exchange_rejects_bad_inputs_with_clear_errors() -> None:
    algo = algorithms.make("graft", n=N)
    rollouts = {a: make_rollouts(a, ks) for a, ks in PAIR.items()}
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="compute_advantages"):
        algo.exchange(rollouts, ["A", "B"], TextScorer(), rng)
    algo.compute_advantages(rollouts)
    with pytest.raises(ValueError, match=r"receivers \['Z'\]"):
        algo.exchange(rollouts, ["Z"], TextScorer(), rng)
    with pytest.raises(ValueError, match="returned 0 results"):
        algo.exchange(rollouts, ["A"], lambda receiver, prompts, texts, finish_reasons: [], rng)
    rollouts["B"].prompt_ids[0] = "other"
    with pytest.raises(ValueError, match="different prompt batches"):
        algo.exchange(rollouts, ["A"], TextScorer(), rng)
    with pytest.raises(ValueError, match="config n=8"):
        algorithms.make("graft").compute_advantages(rollouts)


class Probe(ExchangeStrategy):
    """A strategy that records the inputs its `select` saw and leaves out receiver "B"."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.selected: list[list[str]] = []

    def select(self, rollouts, receivers, scorer, rng) -> ExchangeResult:
        self.selected.append(list(receivers))
        return ExchangeResult({r: [] for r in receivers if r != "B"}, ExchangeStats("probe"))


def test_the_base_checks_inputs_before_select_and_that_every_receiver_got_an_entry() -> None:
    probe = Probe(algorithms.configure("grpo", n=N))
    rollouts = {a: make_rollouts(a, ks) for a, ks in PAIR.items()}
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"receivers \['Z'\] have no rollouts"):
        probe(rollouts, ["Z"], TextScorer(), rng)
    with pytest.raises(ValueError, match="config says n=8"):
        Probe(algorithms.configure("grpo"))(rollouts, ["A"], TextScorer(), rng)
    assert probe.selected == []  # select never ran on inputs that failed the checks
    assert probe(rollouts, ["A"], TextScorer(), rng).transfers == {"A": []}
    with pytest.raises(ValueError, match=r"strategy 'unregistered' returned nothing for \['B'\]"):
        probe(rollouts, ["A", "B"], TextScorer(), rng)
    assert probe.selected == [["A"], ["A", "B"]]


@pytest.mark.parametrize("name", algorithms.available())
def test_a_strategy_keeps_nothing_between_steps_but_its_state_dict(name) -> None:
    """After two steps the strategy equals a fresh one given its `state_dict`, and each
    step's stats are in its own result (the first is not overwritten by the second)."""
    algo = algorithms.make(name, n=N)
    summaries, results = [], []
    for ks in (PAIR, {"A": PAIR["B"], "B": PAIR["A"]}):
        rollouts = {a: make_rollouts(a, k) for a, k in ks.items()}
        algo.compute_advantages(rollouts)
        results.append(algo.exchange(rollouts, list(ks), TextScorer(), np.random.default_rng(0)))
        summaries.append(results[-1].stats.summary())
    fresh = make_strategy(algo.config)
    fresh.load_state_dict(algo.strategy.state_dict())
    assert vars(fresh) == vars(algo.strategy)
    assert [result.stats.summary() for result in results] == summaries
