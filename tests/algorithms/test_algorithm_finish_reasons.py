"""Finish reasons travel with every response: how a source's response ended ("stop": it
emitted EOS, "length": cut at max_new_tokens) reaches the receiver's scorer, which
appends its own EOS only after "stop" (issue 14, item 2)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

import algorithms
from algorithms.rollouts import append_groups, build_rollouts
from algorithms.testing import PAIR, N, TextScorer, make_rollouts


class EndingScorer(TextScorer):
    """A `TextScorer` that also records the finish reason it was given for each text."""

    def __init__(self) -> None:
        super().__init__()
        self.endings: list[tuple[str, str]] = []

    def __call__(
        self,
        receiver: str,
        prompts: Sequence[int],
        texts: Sequence[str],
        finish_reasons: Sequence[str],
    ):
        self.endings += zip(texts, finish_reasons, strict=True)
        return super().__call__(receiver, prompts, texts, finish_reasons)


EXCHANGING = [name for name in algorithms.available() if algorithms.preset(name).exchange != "none"]


@pytest.mark.parametrize("name", EXCHANGING)
def test_the_scorer_is_told_how_each_peer_response_ended(name):
    rollouts = {agent: make_rollouts(agent, ks) for agent, ks in PAIR.items()}
    for agent in rollouts.values():  # response 1: a success on some prompts (all SGT moves)
        for group in agent.finish_reasons:
            group[1] = "length"
    ending = {
        text: reason
        for agent in rollouts.values()
        for texts, reasons in zip(agent.texts, agent.finish_reasons, strict=True)
        for text, reason in zip(texts, reasons, strict=True)
    }
    algo = algorithms.make(name, n=N)
    algo.compute_advantages(rollouts)
    scorer = EndingScorer()
    algo.exchange(rollouts, list(rollouts), scorer, np.random.default_rng(0))
    assert scorer.endings, f"{name} scored nothing"
    assert [reason for text, reason in scorer.endings] == [ending[t] for t, _ in scorer.endings]
    assert "length" in {reason for _, reason in scorer.endings}


def test_rollouts_refuse_missing_or_unknown_finish_reasons():
    rollouts = make_rollouts("A", [1, 2])
    with pytest.raises(ValueError, match=r"AgentRollouts\('A'\).finish_reasons has 1 prompts"):
        type(rollouts)(**{**vars(rollouts), "finish_reasons": [["stop"] * N]})
    with pytest.raises(ValueError, match=r"finish_reasons must be in \('stop', 'length'\).*'eos'"):
        type(rollouts)(**{**vars(rollouts), "finish_reasons": [["stop"] * N, ["eos"] * N]})


def test_rollout_assembly_keeps_each_responses_finish_reason():
    source = make_rollouts("A", [1, 2, 3])
    fields = (source.prompt_ids, source.prompts, source.texts, source.token_ids, source.logprobs)

    def build(reasons):
        return build_rollouts("A", *fields, reasons, source.rewards)

    reasons = [["stop", "length", "stop", "stop"], ["length"] * N, ["stop"] * N]
    built = build(reasons)
    assert built.finish_reasons == reasons
    refill = append_groups(built, built, [1])  # dynamic sampling appends kept refill groups
    assert refill.finish_reasons == [*reasons, reasons[1]]
    with pytest.raises(ValueError, match=r"prompt 0 \(q0\): 4 responses and 3 finish reasons"):
        build([r[:3] for r in reasons])
