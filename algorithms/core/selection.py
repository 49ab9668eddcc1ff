"""Which prompts move between policies (GRAFT-SPEC §2 gate and balancing, §7, §8).

All functions take success counts k (correct responses per prompt, out of n) and
return sorted int64 prompt indices, so callers can index rollouts directly.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from algorithms.core._checks import check_int, check_rng, integer_array, success_counts

CANDIDATE_RULES = ("informative", "any_success")


def _check_balance(balance: bool, candidates: str) -> None:
    """Balancing ranks by k_S, so zero-advantage all-pass groups would displace informative ones."""
    if balance and candidates == "any_success":
        raise ValueError("candidates='any_success' needs balance=False (balancing ranks by k_S)")


def _eligible_sources(k: np.ndarray, n: int, candidates: str) -> np.ndarray:
    """Which source groups a rule lets move: 1 <= k < n (Eq.4) or k >= 1 (SGT's rule)."""
    if candidates == "informative":
        return (k >= 1) & (k < n)
    if candidates == "any_success":
        return k >= 1
    raise ValueError(f"candidates must be one of {CANDIDATE_RULES}, got {candidates!r}")


def exchange_candidates(
    k_source: ArrayLike, k_receiver: ArrayLike, n: int, candidates: str = "informative"
) -> np.ndarray:
    """C_{S→R} (Eq.4): prompts the receiver failed n/n and the source solved 1..n-1 times.

    A source group with k = n has zero reward variance, so all its advantages are 0
    and it would teach the receiver nothing through the policy gradient.
    candidates='any_success' is SGT's eligibility, which the paper's no-balance row
    keeps (App. G): k_S >= 1, so all-pass source groups move too; they add only
    tokens to the receiver's token-mean denominator.
    """
    n = check_int(n, "n", minimum=1)
    source = success_counts(k_source, "k_source", ndim=1, n=n)
    receiver = success_counts(k_receiver, "k_receiver", ndim=1, n=n)
    if source.shape != receiver.shape:
        raise ValueError(
            f"k_source has {source.size} prompts but k_receiver has {receiver.size}; "
            "both must count the same prompt batch"
        )
    eligible = _eligible_sources(source, n, candidates)
    return np.flatnonzero((receiver == 0) & eligible).astype(np.int64)


def select_with_ties(candidates: ArrayLike, k_source: ArrayLike, m: int) -> np.ndarray:
    """Keep the m candidates with the highest k_source plus every candidate tied with the m-th.

    Keeping ties makes the result independent of how prompts happen to be ordered in
    the batch (Alg.1), at the price that the kept count may exceed m.
    """
    k = success_counts(k_source, "k_source", ndim=1, n=None)
    chosen = integer_array(candidates, "candidates", ndim=1)
    m = check_int(m, "m", minimum=0)
    out_of_range = (chosen < 0) | (chosen >= k.size)
    if out_of_range.any():
        raise ValueError(
            f"candidates contains index {chosen[out_of_range][0]}, "
            f"outside the {k.size} prompts of k_source"
        )
    if np.unique(chosen).size != chosen.size:
        raise ValueError(f"candidates contains repeated prompt indices: {chosen.tolist()}")
    if m == 0 or chosen.size == 0:
        return np.empty(0, dtype=np.int64)
    if m >= chosen.size:
        return np.sort(chosen)
    threshold = np.sort(k[chosen])[::-1][m - 1]
    return np.sort(chosen[k[chosen] >= threshold])


def select_exchange(
    k_a: ArrayLike,
    k_b: ArrayLike,
    n: int,
    balance: bool = True,
    candidates: str = "informative",
) -> tuple[np.ndarray, np.ndarray]:
    """(a_to_b, b_to_a): prompts transferred from A to B and from B to A.

    balance=True is the paper's balanced exchange: m = min(|C_AB|, |C_BA|) and
    select-with-ties in each direction, so neither model floods the other with
    off-policy data; m = 0 transfers nothing either way. balance=False
    (graft-no-balance) transfers every candidate. `candidates` is the rule of
    `exchange_candidates`; 'any_success' needs balance=False.
    """
    _check_balance(balance, candidates)
    a_to_b = exchange_candidates(k_a, k_b, n, candidates)
    b_to_a = exchange_candidates(k_b, k_a, n, candidates)
    if not balance:
        return a_to_b, b_to_a
    m = min(a_to_b.size, b_to_a.size)
    return select_with_ties(a_to_b, k_a, m), select_with_ties(b_to_a, k_b, m)


def select_exchange_multi(
    k: ArrayLike, n: int, balance: bool = True, candidates: str = "informative"
) -> dict[tuple[int, int], np.ndarray]:
    """Exchange among N policies [project extension, GRAFT-SPEC §8].

    k is [N_agents, P]. For every receiver r and prompt with k[r] == 0, the source
    is the informative peer (1 <= k < n) with the highest k, ties broken by the
    lowest agent index. With candidates='any_success' an all-pass peer (k = n) is
    eligible too, but only when no peer is informative [project choice]: its group
    carries zero advantage, so it must not displace one that carries signal; it needs
    balance=False, as in `select_exchange`. With balance=True each unordered pair
    (a, b) is then balanced as in the two-model case. A prompt dropped by balancing is
    not offered to a second-best peer: the receiver keeps its own group, as with two
    models. Returns {(source, receiver): prompt indices} for every ordered pair; with
    N = 2 this equals `select_exchange`.
    """
    _check_balance(balance, candidates)
    n = check_int(n, "n", minimum=1)
    counts = success_counts(k, "k", ndim=2, n=n)
    num_agents = counts.shape[0]
    if num_agents == 0:
        raise ValueError("k has no agents (shape [0, P]); need at least one policy")

    # Rank of each group as a source: k if informative, 0 if all-pass and eligible, else -1.
    rank = np.where(_eligible_sources(counts, n, candidates), np.where(counts < n, counts, 0), -1)
    proposed: dict[tuple[int, int], np.ndarray] = {}
    for receiver in range(num_agents):
        peer_rank = rank.copy()
        peer_rank[receiver] = -1
        best_source = np.argmax(peer_rank, axis=0)  # first maximum: lowest agent index
        wanted = (counts[receiver] == 0) & (peer_rank.max(axis=0) >= 0)
        for source in range(num_agents):
            if source != receiver:
                proposed[(source, receiver)] = np.flatnonzero(
                    wanted & (best_source == source)
                ).astype(np.int64)
    if not balance:
        return proposed

    selected: dict[tuple[int, int], np.ndarray] = {}
    for a in range(num_agents):
        for b in range(a + 1, num_agents):
            m = min(proposed[(a, b)].size, proposed[(b, a)].size)
            selected[(a, b)] = select_with_ties(proposed[(a, b)], counts[a], m)
            selected[(b, a)] = select_with_ties(proposed[(b, a)], counts[b], m)
    return selected


def random_prompt_selection(
    k_receiver: ArrayLike, count: int, rng: np.random.Generator
) -> np.ndarray:
    """graft-random-prompts: `count` of the receiver's all-fail prompts, uniformly, no repeats.

    The control for the gate: same number of transferred prompts, but chosen
    without looking at whether the source solved them.
    """
    k = success_counts(k_receiver, "k_receiver", ndim=1, n=None)
    count = check_int(count, "count", minimum=0)
    rng = check_rng(rng)
    all_fail = np.flatnonzero(k == 0)
    if count > all_fail.size:
        raise ValueError(
            f"count={count} exceeds the receiver's {all_fail.size} all-fail prompts (k == 0)"
        )
    return np.sort(rng.choice(all_fail, size=count, replace=False)).astype(np.int64)


def sgt_pairs(
    k_receiver: ArrayLike, source_rewards: ArrayLike, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """SGT (Mutual RL): one uniformly chosen correct source response per receiver all-fail prompt.

    Returns (prompt, response) pairs in prompt order, only for prompts where the
    source has at least one correct response. Rewards must be binary (1 = correct).
    """
    rewards = np.asarray(source_rewards, dtype=np.float64)
    if rewards.ndim != 2:
        raise ValueError(f"source_rewards must be [prompts, n], got shape {rewards.shape}")
    not_binary = (rewards != 0) & (rewards != 1)
    if not_binary.any():
        p, i = (int(x) for x in np.argwhere(not_binary)[0])
        raise ValueError(f"source_rewards[{p}, {i}] = {rewards[p, i]} is not a binary reward")
    k = success_counts(k_receiver, "k_receiver", ndim=1, n=rewards.shape[1])
    if k.size != rewards.shape[0]:
        raise ValueError(
            f"k_receiver has {k.size} prompts but source_rewards has {rewards.shape[0]}"
        )
    rng = check_rng(rng)
    pairs = []
    for prompt in np.flatnonzero(k == 0):
        correct = np.flatnonzero(rewards[prompt] == 1)
        if correct.size:
            pairs.append((int(prompt), int(rng.choice(correct))))
    return pairs
