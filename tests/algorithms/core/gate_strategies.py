"""Hypothesis strategies for the gate's success counts, biased so properties reach its rules.

Counts drawn uniformly from 0..n rarely make a receiver fail a prompt its peer half-solved in
both directions at once, and almost never tie at the m-th candidate, so the balancing and
ties rules of GRAFT-SPEC §2 (Alg.1) went mostly unexercised. Here each prompt draws a
pattern first: the receiver failed and the source is informative (either direction), both
failed, the source passed all n, or any counts at all (so every table stays reachable), and
informative counts come from one or two levels per example, so ties are common. `gate_rules`
names the rules an example reaches; `label_gate_rules` records them as `hypothesis.event`s
(`pytest --hypothesis-show-statistics` prints their shares per test).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

T = TypeVar("T")
RULES = ("moves", "balancing", "ties", "all-pass source")
"""What an example can reach: some prompt moves (m >= 1); balancing drops a candidate
(m < |C| in a direction); the ties rule keeps more than m (a tie at the m-th); a receiver
all-fail prompt whose source passed all n (moves only under candidates='any_success')."""

# Per-prompt patterns, repeated to weight them: hypothesis shrinks towards the first one.
_PATTERNS = (
    *("both fail", "a informs b", "b informs a", "a informs b", "b informs a"),
    *("all pass", "any"),
)


@st.composite
def group_size(draw: st.DrawFn, largest: int = 8) -> int:
    """n, small values (where every informative count ties) more often than large ones."""
    return draw(st.one_of(st.sampled_from([2, 3, 4]), st.integers(1, largest)))


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
def count_pairs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int]:
    """Success counts (k_a, k_b) of two models on one prompt batch with group size n."""
    n = draw(group_size())
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


def _direction(k_source: np.ndarray, k_receiver: np.ndarray, n: int) -> np.ndarray:
    """Eq.4 read literally: the source's counts on the receiver's all-fail prompts it
    half-solved, highest first."""
    chosen = (k_receiver == 0) & (k_source >= 1) & (k_source < n)
    return np.sort(k_source[chosen])[::-1]


def gate_rules(k_a: np.ndarray, k_b: np.ndarray, n: int) -> frozenset[str]:
    """The `RULES` that the balanced gate reaches on (k_a, k_b), from their definitions
    (GRAFT-SPEC §2), not from `algorithms.core`'s code."""
    ranked = (_direction(k_a, k_b, n), _direction(k_b, k_a, n))
    m = min(r.size for r in ranked)
    reached = set()
    if m >= 1:
        reached.add("moves")
    if m >= 1 and any(r.size > m for r in ranked):
        reached.add("balancing")
    if m >= 1 and any(r.size > m and r[m] == r[m - 1] for r in ranked):
        reached.add("ties")
    if np.any((k_a == n) & (k_b == 0)) or np.any((k_b == n) & (k_a == 0)):
        reached.add("all-pass source")
    return frozenset(reached)


def pair_rules(k: np.ndarray, n: int) -> frozenset[str]:
    """The rules that any pair of agents of table k reaches as a two-model gate."""
    agents = k.shape[0]
    reached: set[str] = set()
    for a in range(agents):
        for b in range(a + 1, agents):
            reached |= gate_rules(k[a], k[b], n)
    return frozenset(reached)


def label_gate_rules(reached: frozenset[str]) -> None:
    """One `hypothesis.event` per rule reached (or "no rule reached"), so the statistics of
    `pytest --hypothesis-show-statistics` show each rule's share of the examples."""
    for rule in RULES:
        if rule in reached:
            event(f"reached: {rule}")
    if not reached:
        event("no rule reached")


def rule_shares(
    examples: st.SearchStrategy[T], rules_of: Callable[..., frozenset[str]], size: int = 300
) -> dict[str, float]:
    """The share of `size` examples drawn from `examples` whose `rules_of(*example)` reaches
    each rule, over a fixed draw: hypothesis derandomized (its seed is a digest of this
    function), no example database, so every run on any machine sees the same examples."""
    reached: list[frozenset[str]] = []

    @settings(
        max_examples=size,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(examples)
    def draw(example: T) -> None:
        reached.append(rules_of(*example))

    draw()
    return {rule: sum(rule in r for r in reached) / len(reached) for rule in RULES}
