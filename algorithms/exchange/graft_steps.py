"""GRAFT's steps as functions of their inputs: the gate's plan (§2), the receiver's scores
of a list of peer groups (§4's s), the groups that share one admission draw, the check
of what a hook returned, and the check of GRAFT's option sets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from algorithms.config import AlgorithmConfig
from algorithms.core import (
    compatibility_scores,
    exchange_candidates,
    normalised_loglik,
    random_prompt_selection,
    select_exchange,
    select_exchange_multi,
)
from algorithms.exchange.base import score_texts
from algorithms.exchange.peer_group import PeerGroup
from algorithms.exchange.stats import ExchangeStats
from graft_env.schema import require
from graft_env.types import AgentRollouts, Scorer

Direction = tuple[str, str]


def gate_plan(
    rollouts: Mapping[str, AgentRollouts],
    receivers: Sequence[str],
    cfg: AlgorithmConfig,
    rng: np.random.Generator,
    stats: ExchangeStats,
) -> dict[Direction, np.ndarray]:
    """The prompts each (source, receiver) direction moves by the gate (Eq.4) with
    balancing and ties, or `cfg.selection`'s control; fills each direction's candidate
    counts in `stats`. N > 2 agents: the §8 extension, in the order of `rollouts`."""
    agents = list(rollouts)
    k = np.stack([rollouts[agent].k for agent in agents])

    def select(balance: bool) -> dict[tuple[int, int], np.ndarray]:
        if len(agents) != 2:
            return select_exchange_multi(k, cfg.n, balance, cfg.candidates)
        a_to_b, b_to_a = select_exchange(k[0], k[1], cfg.n, balance, cfg.candidates)
        return {(0, 1): a_to_b, (1, 0): b_to_a}

    proposed, by_index = select(False), select(cfg.balance)
    plan: dict[Direction, np.ndarray] = {}
    taken: dict[str, np.ndarray] = {}
    for (s, r), prompts in sorted(by_index.items(), key=lambda item: (item[0][1], item[0][0])):
        source, receiver = agents[s], agents[r]
        if receiver not in receivers:
            continue
        direction = stats.direction(source, receiver)
        direction.candidates = int(proposed[(s, r)].size)
        direction.gate_candidates = int(exchange_candidates(k[s], k[r], cfg.n, cfg.candidates).size)
        if cfg.selection == "random_prompts":
            # Same count, uniformly among the receiver's all-fail prompts that no other
            # source already fills: taken prompts are marked as not all-fail (k = 1).
            available_k = k[r].copy()
            available_k[taken.get(receiver, np.empty(0, dtype=np.int64))] = 1
            prompts = random_prompt_selection(available_k, int(prompts.size), rng)
            taken[receiver] = np.concatenate([taken.get(receiver, prompts[:0]), prompts])
        plan[(source, receiver)] = prompts
    return plan


def scored_groups(
    receiver: str, groups: Sequence[PeerGroup], scorer: Scorer, n: int, mode: str
) -> list[PeerGroup]:
    """The groups with the receiver's view (`scored`) and s = exp(l_R - l_S) filled, l
    normalised by `mode` (compat_norm), from one scorer call for all their texts."""
    for group in groups:
        group.check(n)
    texts = [text for g in groups for text in g.texts]
    reasons = [reason for g in groups for reason in g.finish_reasons]
    prompt_indices = [g.prompt_index for g in groups for _ in range(n)]
    scored = score_texts(scorer, receiver, prompt_indices, texts, reasons)
    result = []
    for j, group in enumerate(groups):
        view = scored[j * n : (j + 1) * n]
        receiver_ll = [
            normalised_loglik(s.logprobs, t, mode) for s, t in zip(view, group.texts, strict=True)
        ]
        source_ll = [
            normalised_loglik(lp, t, mode)
            for lp, t in zip(group.logprobs, group.texts, strict=True)
        ]
        scores = compatibility_scores(np.array(receiver_ll), np.array(source_ll))
        result.append(replace(group, scored=tuple(view), scores=scores))
    return result


def admission_units(sources: Sequence[str], match: str) -> list[list[int]]:
    """Rows (groups, in order, by their `sources`) that share one admission draw: each
    transferred group (admission_match='group'), or every group of one direction this step
    ('direction', App. F: the random control matches the floor's count "separately in each
    direction"). Only random admission draws; the other weights are per response either way."""
    if match == "group":
        return [[j] for j in range(len(sources))]
    by_source: dict[str, list[int]] = {}
    for j, source in enumerate(sources):
        by_source.setdefault(source, []).append(j)
    return list(by_source.values())


def check_groups(strategy: str, hook: str, groups: list[PeerGroup]) -> list[PeerGroup]:
    """`groups` as a hook left them, refused (naming `hook`) if one (source, prompt) is in
    them twice, or, once scored (`rank_groups`), if one has no scores."""
    keys = [group.key for group in groups]
    scored = hook == "rank_groups"
    if len(set(keys)) != len(keys) or (scored and any(g.scores is None for g in groups)):
        what = "scored groups, each" if scored else "each (source, prompt)"
        raise ValueError(
            f"strategy {strategy!r}: {hook} must return {what} at most once; got {keys}"
        )
    return groups


def check_option_conflicts(cfg: AlgorithmConfig, where: str) -> None:
    """GRAFT's option sets that would silently do something other than they say, as a
    one-line error naming the key under `where`."""
    if cfg.admission_match != "direction" and cfg.admission != "random":
        raise require(
            where,
            "admission_match",
            cfg.admission_match,
            "'direction' unless admission='random' (only random admission matches a count)",
        )
    if cfg.admission == "random" and not cfg.compat:
        raise require(
            where, "admission", cfg.admission, "'compat' when compat=False (no scores to admit)"
        )
    if cfg.stored and cfg.balance:
        raise require(where, "balance", True, "False with stored=True (a stored log is one-way)")
    if cfg.candidates == "any_success" and cfg.balance:
        raise require(
            where,
            "candidates",
            cfg.candidates,
            "'informative' with balance=True (balancing keeps the highest k_S first, so "
            "zero-advantage all-pass groups would displace informative ones)",
        )
    if cfg.pooled and cfg.candidates == "any_success":
        raise require(
            where,
            "pooled",
            True,
            "False with candidates='any_success' (an all-pass source group pooled with the "
            "receiver's all-fail group gets non-zero advantages, not the zero it carries)",
        )
