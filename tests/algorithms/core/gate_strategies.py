"""Which of the gate's rules (GRAFT-SPEC §2, Alg.1) an example of success counts reaches, for
the gate-biased count strategies of `algorithms.testing` (`count_pairs`, `count_tables`),
which exist so that the balancing and ties rules are exercised. `gate_rules`
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
