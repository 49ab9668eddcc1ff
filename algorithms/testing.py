"""What a strategy's tests need, importable wherever `algorithms` is installed: hand-made
rollouts, a deterministic re-scorer, one exchange step, and hypothesis strategies for
success counts biased towards GRAFT's gate (needs `hypothesis`, in the dev extra).

    from algorithms.testing import TextScorer, count_pairs, make_rollouts, run_exchange

`make_rollouts(agent, ks)` builds an agent's `AgentRollouts` whose prompt p has ks[p]
successes of n, with texts naming agent, prompt, response and verdict; `TextScorer` re-scores
a text at the mean log-prob a table gives it (a pure function of the text, standing in for
the receiver's real re-scoring); `run_exchange` makes an algorithm and runs one exchange.

Counts drawn uniformly from 0..n rarely make a receiver fail a prompt its peer half-solved in
both directions at once, and almost never tie at the m-th candidate, so a property drawn that
way seldom sees anything move, be balanced away or dropped. In `count_pairs` and
`count_tables` each prompt draws a pattern first: the receiver failed and the source is
informative (either direction), both failed, the source passed all n, or any counts at all
(so every table stays reachable), and informative counts come from one or two levels per
example, so ties are common.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from hypothesis import strategies as st

import algorithms
from graft_env.types import AgentRollouts, ScoredText, TransferredGroup

if TYPE_CHECKING:
    from algorithms.algorithm import Algorithm
    from algorithms.exchange.stats import ExchangeStats

N = 4  # group size of `make_rollouts` and `run_exchange` unless told
GEN_LOGP = -1.0  # every source token's generation log-prob, and `TextScorer`'s default


def rewards_with_k(ks: Sequence[int], n: int = N) -> np.ndarray:
    """Binary rewards [P, n] whose row p has ks[p] successes (first ks[p] responses)."""
    return np.array([[1.0] * k + [0.0] * (n - k) for k in ks]).reshape(len(ks), n)


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
    ) -> list[ScoredText]:
        self.calls.append((receiver, list(prompts), list(texts)))
        return [
            ScoredText(
                token_ids=list(range(1, 3 + len(text) % 3)),
                logprobs=np.full(2 + len(text) % 3, self.mean_logp.get(text, GEN_LOGP)),
            )
            for text in texts
        ]


def run_exchange(
    name: str,
    agents: dict[str, Sequence[int]],
    scorer: TextScorer | None = None,
    seed: int = 0,
    **options: Any,
) -> tuple[Algorithm, dict[str, AgentRollouts], dict[str, list[TransferredGroup]], ExchangeStats]:
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


# Success counts of a pair whose gate moves groups both ways (each fails what the other
# half-solved on some prompts).
PAIR = {"A": [0, 0, 0, 0, 2, 4, 0], "B": [3, 1, 3, 0, 0, 0, 0]}


# Per-prompt patterns, repeated to weight them: hypothesis shrinks towards the first one.
_PATTERNS = (
    *("both fail", "a informs b", "b informs a", "a informs b", "b informs a"),
    *("all pass", "any"),
)


@st.composite
def group_size(draw: st.DrawFn, largest: int = 8, smallest: int = 1) -> int:
    """n in smallest..largest, small values (where every informative count ties) more often
    than large ones."""
    small = [n for n in (2, 3, 4) if smallest <= n <= largest]
    return draw(st.one_of(st.sampled_from(small), st.integers(smallest, largest)))


@st.composite
def _informative(draw: st.DrawFn, n: int, levels: list[int]) -> int:
    """1 <= k < n from the example's few levels (ties), or any such k; 0 when n = 1."""
    if n == 1:
        return 0
    return draw(st.one_of(st.sampled_from(levels), st.integers(1, n - 1)))


@st.composite
def _levels(draw: st.DrawFn, n: int) -> list[int]:
    """One or two informative counts that most of an example's informative groups share."""
    return draw(st.lists(st.integers(1, max(n - 1, 1)), min_size=1, max_size=2))


@st.composite
def _prompt(draw: st.DrawFn, n: int, levels: list[int]) -> tuple[int, int]:
    """(k_a, k_b) of one prompt, by pattern."""
    pattern = draw(st.sampled_from(_PATTERNS))
    if pattern == "both fail":
        return 0, 0
    if pattern == "all pass":
        passed = (n, 0)
        return passed if draw(st.booleans()) else passed[::-1]
    if pattern == "any":
        return draw(st.integers(0, n)), draw(st.integers(0, n))
    informed = draw(_informative(n, levels))
    return (informed, 0) if pattern == "a informs b" else (0, informed)


@st.composite
def count_pairs(draw: st.DrawFn, smallest_n: int = 1) -> tuple[np.ndarray, np.ndarray, int]:
    """Success counts (k_a, k_b) of two models on one prompt batch with group size n (at
    least `smallest_n`: an algorithm needs 2, the gate alone takes 1)."""
    n = draw(group_size(smallest=smallest_n))
    levels = draw(_levels(n))
    size = draw(st.integers(0, 24))  # not st.lists' own sizes, mostly too short to tie
    prompts = draw(st.lists(_prompt(n, levels), min_size=size, max_size=size))
    k = np.array(prompts, dtype=np.int64).reshape(-1, 2)
    return k[:, 0].copy(), k[:, 1].copy(), n


@st.composite
def count_tables(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """Success counts k [agents, prompts] of N models with group size n: each cell fails
    (most often), is informative at the example's levels, passes all n, or is any count."""
    n = draw(group_size(largest=6))
    agents = draw(st.one_of(st.sampled_from([2, 3]), st.integers(1, 4)))
    prompts = draw(st.integers(0, 16))
    levels = draw(_levels(n))
    cell = st.sampled_from(["fail", "informative", "fail", "informative", "all pass", "any"])
    cells = []
    for kind in draw(st.lists(cell, min_size=agents * prompts, max_size=agents * prompts)):
        if kind == "informative":
            cells.append(draw(_informative(n, levels)))
        elif kind == "any":
            cells.append(draw(st.integers(0, n)))
        else:
            cells.append(n if kind == "all pass" else 0)
    return np.array(cells, dtype=np.int64).reshape(agents, prompts), n
