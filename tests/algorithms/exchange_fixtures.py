"""Hand-made rollouts and a deterministic scorer shared by the exchange and batch tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import algorithms
from graft_env.types import AgentRollouts, ScoredText

N = 4


GEN_LOGP = -1.0  # every source token's generation log-prob in these tests


def rewards_with_k(ks: Sequence[int], n: int = N) -> np.ndarray:
    """Binary rewards [P, n] whose row p has ks[p] successes (first ks[p] responses)."""
    return np.array([[1.0] * k + [0.0] * (n - k) for k in ks])


def make_rollouts(agent: str, ks: Sequence[int], n: int = N) -> AgentRollouts:
    """Rollouts of `agent` with success counts `ks`; texts name agent, prompt and response."""
    rewards = rewards_with_k(ks, n)
    num_prompts = len(ks)
    texts = [
        [f"{agent} p{p} r{i} {'right' if rewards[p, i] else 'wrong'}" for i in range(n)]
        for p in range(num_prompts)
    ]
    token_ids = [
        [[100 + p, 200 + i, 300][: 2 + i % 2] for i in range(n)] for p in range(num_prompts)
    ]
    logprobs = [[np.full(len(ids), GEN_LOGP) for ids in row] for row in token_ids]
    return AgentRollouts(
        agent=agent,
        prompt_ids=[f"q{p}" for p in range(num_prompts)],
        prompts=[f"prompt {p}" for p in range(num_prompts)],
        texts=texts,
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reasons=[["stop"] * n for _ in range(num_prompts)],
        rewards=rewards,
    )


class TextScorer:
    """Receiver re-scoring as a pure function of the text: mean log-prob from a table."""

    def __init__(self, mean_logp: dict[str, float] | None = None) -> None:
        self.mean_logp = mean_logp or {}
        self.calls: list[tuple[str, list[int], list[str]]] = []

    def __call__(
        self,
        receiver: str,
        prompts: Sequence[int],
        texts: Sequence[str],
        finish_reasons: Sequence[str],
    ):
        self.calls.append((receiver, list(prompts), list(texts)))
        return [
            ScoredText(
                token_ids=list(range(1, 3 + len(text) % 3)),
                logprobs=np.full(2 + len(text) % 3, self.mean_logp.get(text, GEN_LOGP)),
            )
            for text in texts
        ]


def run_exchange(name: str, agents: dict[str, Sequence[int]], scorer=None, seed=0, **options):
    """make(name), compute advantages, exchange to every agent; returns
    (algo, rollouts, transfers, stats)."""
    receivers = options.pop("receivers", None) or list(agents)
    algo = algorithms.make(name, n=N, **options)
    rollouts = {agent: make_rollouts(agent, ks) for agent, ks in agents.items()}
    algo.compute_advantages(rollouts)
    exchanged = algo.exchange(
        rollouts, receivers, scorer or TextScorer(), np.random.default_rng(seed)
    )
    return algo, rollouts, exchanged.transfers, exchanged.stats


PAIR = {"A": [0, 0, 0, 0, 2, 4, 0], "B": [3, 1, 3, 0, 0, 0, 0]}
