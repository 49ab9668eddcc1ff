"""GRAFT's public hooks (plan_prompts, peer_sources, peer_group, rank_groups, weigh), a
variant's inherited options and its own counters; the graft-topk worked example of
CONTRIBUTING.md runs as written, under the names graft-best-k / best_k (the recipe's trial adds
graft-topk itself to the package)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import numpy as np
import pytest
from worked_example import topk_example

import algorithms
import algorithms.config as config_module
from algorithms.exchange import ExchangeStats, register_strategy
from algorithms.exchange.graft import GraftExchange
from algorithms.testing import N, TextScorer, make_rollouts
from graft_env.schema import OptionError

EXAMPLE, OPTION = "graft-best-k", "best_k"


@pytest.fixture
def topk(registries, tmp_path, monkeypatch) -> dict:
    """The example imported as the module it is (its options' types resolve in it)."""
    path = tmp_path / "graft_topk_example.py"
    path.write_text(topk_example(EXAMPLE, OPTION), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("graft_topk_example", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return vars(module)


def exchange(name: str, agents: dict, scorer=None, seed: int = 0, **options):
    algo = algorithms.make(name, n=N, **options)
    rollouts = {agent: make_rollouts(agent, ks) for agent, ks in agents.items()}
    algo.compute_advantages(rollouts)
    result = algo.exchange(
        rollouts, list(agents), scorer or TextScorer(), np.random.default_rng(seed)
    )
    return rollouts, result


# Each failed five prompts the other solved 1..3 of 4 times: the gate moves five each way.
AGENTS = {"A": [0, 0, 0, 0, 0, 1, 2, 3, 1, 2], "B": [1, 2, 3, 1, 2, 0, 0, 0, 0, 0]}


def _scorer_favouring(prompts: dict[int, float]) -> TextScorer:
    """A's re-scoring of B's texts of each given prompt at that mean log-prob (s = e^(l+1))."""
    table = {
        f"B p{p} r{i} {verdict}": logp
        for p, logp in prompts.items()
        for i in range(N)
        for verdict in ("right", "wrong")
    }
    return TextScorer(table)


def test_graft_topk_keeps_the_k_groups_of_highest_mean_min_s_1_and_counts_the_rest(topk):
    scorer = _scorer_favouring({0: -3.0, 1: -1.0, 2: -2.0, 3: -1.5, 4: -0.5})
    _, result = exchange(EXAMPLE, AGENTS, scorer, best_k=2, delta=0.0)
    moved = [(g.source, g.prompt_index) for g in result.transfers["A"]]
    assert moved == [("B", 1), ("B", 4)]  # s = 1 and min(e^0.5, 1) = 1 beat e^-0.5, e^-1, e^-2
    summary = result.stats.summary()
    assert summary[f"{EXAMPLE}/dropped_groups"] == 6.0  # 3 of A's and 3 of B's
    assert result.stats.directions[("B", "A")].selected_prompts == [1, 4]
    assert summary["exchange/B->A/prompts"] == 2.0
    assert summary["exchange/B->A/transferred"] == 2.0 * N


def test_a_variant_reads_and_sets_its_base_s_options_and_declares_its_own(topk):
    config = algorithms.configure(EXAMPLE, delta=0.0, best_k=1)
    assert (config.delta, config.best_k, config.exchange) == (0.0, 1, EXAMPLE)
    assert algorithms.preset(f"{EXAMPLE}-no-floor").delta == 0.0
    with pytest.raises(OptionError, match=rf"best_k: 1 must be 4 unless exchange='{EXAMPLE}'$"):
        algorithms.configure("graft", best_k=1)
    with pytest.raises(
        OptionError,
        match=rf"delta: 0.5 must be 0.8 unless exchange is one of 'graft', .*'{EXAMPLE}'",
    ):
        algorithms.configure("sgt", delta=0.5)
    strategy = topk["GraftTopK"]
    assert strategy.option_classes() == (topk["TopKOptions"], GraftExchange.options)
    assert config_module.strategy_options()[EXAMPLE] is topk["TopKOptions"]


def test_without_overrides_a_subclass_exchanges_exactly_as_graft(registries):
    register_strategy("test-plain-graft")(type("PlainGraft", (GraftExchange,), {}))
    scorer = _scorer_favouring({0: -3.0, 1: -1.0, 2: -2.0})
    for options in ({}, {"admission": "random"}, {"pooled": True}, {"success_only": True}):
        _, graft = exchange("graft", AGENTS, scorer, seed=3, **options)
        _, plain = exchange("graft", AGENTS, scorer, seed=3, exchange="test-plain-graft", **options)
        for got, want in zip(plain.transfers["A"], graft.transfers["A"], strict=True):
            assert (got.source, got.prompt_index, got.clip) == (
                want.source,
                want.prompt_index,
                want.clip,
            )
            np.testing.assert_array_equal(got.advantages, want.advantages)
            np.testing.assert_array_equal(got.weights, want.weights)
        assert plain.stats.summary() == graft.stats.summary()


def test_peer_group_sees_each_group_before_its_advantages_and_scoring(registries):
    class Shuffled(GraftExchange):
        def peer_group(self, group, rng, stats):
            stats.count("shuffled", source=group.source, receiver=group.receiver)
            return dataclasses.replace(group, rewards=group.rewards[::-1].copy())

    register_strategy("test-reversed")(Shuffled)
    rollouts, result = exchange("graft", AGENTS, exchange="test-reversed")
    for group in result.transfers["A"]:
        reversed_rewards = rollouts["B"].rewards[group.prompt_index][::-1]
        want = algorithms.make("graft", n=N).strategy.group_advantages(reversed_rewards)
        np.testing.assert_array_equal(group.advantages, want)
        assert not np.array_equal(group.advantages, rollouts["B"].advantages[group.prompt_index])
    assert result.stats.summary()["exchange/B->A/test-reversed/shuffled"] == 5.0


def test_plan_prompts_changes_what_moves_and_the_counts_follow(registries):
    class FirstOnly(GraftExchange):
        def plan_prompts(self, plan, rollouts, rng, stats):
            return {direction: prompts[:1] for direction, prompts in plan.items()}

    register_strategy("test-first-only")(FirstOnly)
    _, result = exchange("graft", AGENTS, exchange="test-first-only")
    assert [g.prompt_index for g in result.transfers["A"]] == [0]
    direction = result.stats.directions[("B", "A")]
    assert (direction.candidates, direction.selected_prompts) == (5, [0])


def test_peer_sources_names_where_a_receivers_groups_come_from(registries):
    """A source the step did not sample (here a stored copy of B's rollouts under another
    name) moves through GRAFT's scoring and weighting, counted under its own direction."""

    class FromArchive(GraftExchange):
        def peer_sources(self, receiver, plan, rollouts, scorer, stats):
            archive = dataclasses.replace(rollouts["B"], agent="B-archive")
            prompts = plan[("B", receiver)][:2] if ("B", receiver) in plan else []
            return {**rollouts, "B-archive": archive}, {("B-archive", receiver): prompts}

    register_strategy("test-from-archive")(FromArchive)
    rollouts, result = exchange("graft", AGENTS, exchange="test-from-archive")
    moved = result.transfers["A"]
    assert [(g.source, g.prompt_index) for g in moved] == [("B-archive", 0), ("B-archive", 1)]
    for group in moved:
        assert group.texts == rollouts["B"].texts[group.prompt_index]
        np.testing.assert_array_equal(
            group.advantages, rollouts["B"].advantages[group.prompt_index]
        )
    assert result.transfers["B"] == []  # nothing planned from B-archive to B
    assert result.stats.directions[("B-archive", "A")].selected_prompts == [0, 1]
    assert result.stats.directions[("B", "A")].selected_prompts == []


def test_weigh_replaces_the_weighting_step(registries):
    class Halved(GraftExchange):
        def weigh(self, scores, rewards, rng):
            return np.full(scores.shape, 0.5)

    register_strategy("test-halved")(Halved)
    _, result = exchange("graft", AGENTS, exchange="test-halved")
    assert all(np.all(g.weights == 0.5) for g in result.transfers["A"])
    assert result.stats.directions[("B", "A")].admitted == 5 * N


def test_a_ranking_that_returns_a_group_twice_is_refused(registries):
    class Twice(GraftExchange):
        def rank_groups(self, receiver, groups, stats):
            return groups[:1] * 2

    register_strategy("test-twice")(Twice)
    with pytest.raises(
        ValueError, match="rank_groups must return scored groups, each at most once"
    ):
        exchange("graft", AGENTS, exchange="test-twice")


def test_a_plan_that_moves_a_prompt_twice_names_plan_prompts(registries):
    class Twice(GraftExchange):
        def plan_prompts(self, plan, rollouts, rng, stats):
            return {direction: np.r_[prompts, prompts[:1]] for direction, prompts in plan.items()}

    register_strategy("test-plan-twice")(Twice)
    with pytest.raises(
        ValueError, match=r"plan_prompts \(or peer_group\) must return each \(source, prompt\) at"
    ):
        exchange("graft", AGENTS, exchange="test-plan-twice")


def test_pooling_refuses_a_peer_group_hook_that_changes_the_rewards(registries):
    """The receiver's half of the 2n pool (own_advantages) is over the source's own rewards:
    a hook's other rewards in the transferred half would make the two halves disagree."""

    class Relabelled(GraftExchange):
        def peer_group(self, group, rng, stats):
            return dataclasses.replace(group, rewards=1.0 - np.asarray(group.rewards))

    register_strategy("test-relabelled")(Relabelled)
    _, result = exchange("graft", AGENTS, exchange="test-relabelled")  # Eq.1 over the new ones
    assert result.transfers["A"]
    with pytest.raises(
        ValueError,
        match=r"^strategy 'test-relabelled': peer_group changed the rewards of prompt \d+ from "
        r"'B', but pooled=True pools",
    ):
        exchange("graft", AGENTS, exchange="test-relabelled", pooled=True)


def test_counters_build_their_keys_and_add_up():
    stats = ExchangeStats(strategy="s")
    stats.count("kept")
    stats.count("kept", 2.0)
    stats.count("kept", 1.0, source="B", receiver="A")
    assert stats.summary() == {"s/kept": 3.0, "exchange/B->A/s/kept": 1.0}
    with pytest.raises(ValueError, match="both source and receiver"):
        stats.count("kept", source="B")
    with pytest.raises(ValueError, match="non-empty name"):
        stats.count("")


def test_unknown_names_say_what_was_meant():
    with pytest.raises(
        ValueError, match=r"unknown algorithm 'graft-no-flor'; did you mean 'graft-no-floor'"
    ):
        algorithms.configure("graft-no-flor")
    with pytest.raises(
        ValueError, match=r"\['detla'\] for algorithm 'graft'; did you mean 'delta'"
    ):
        algorithms.configure("graft", detla=0.5)
    with pytest.raises(
        OptionError, match=r"exchange: 'graf' is not one of .*; did you mean 'graft'"
    ):
        algorithms.configure("grpo", exchange="graf")
