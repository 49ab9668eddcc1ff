"""The peer controls of the gap study's second part (issue 39,
docs/study/GAP-CONTROLS-PREREGISTRATION.md): GRAFT with the peer's information removed.

- "graft-shuffled" (shuffled-reward peer): GRAFT exactly (gate, balancing, whole groups,
  compatibility weights), but each transferred group's rewards are permuted within the
  group before its advantages are computed (GRAFT's `peer_group` hook): the peer's traces
  and token counts move, the information of which of them are right does not. Each group's
  permutation is seeded from the step's random stream's seed (the run's seed and step), the
  receiver and the prompt, without drawing from that stream, so everything else GRAFT draws
  is as in GRAFT.
- "graft-twin" (twin peer): GRAFT's gate against the real peer decides which prompts would
  move this step (`C_{S->R}`, balanced); the receiver then answers those prompts again
  itself (`ResamplingScorer.resample`: its own weights, its own sampling seed per round),
  round after round (at most `TWIN_MAX_ROUNDS`) until each has an informative group
  (0 < k < n) or the rounds are spent; each informative group replaces the receiver's
  all-fail group as a peer group would, weighted by GRAFT's weights (s from the receiver
  re-scoring its own traces). Nothing moves from the real peer. Per receiver and step the
  strategy counts how many prompts GRAFT would have moved (`gated_prompts`), how many the
  twin filled (`filled_prompts`), the rounds and the responses drawn, as
  `exchange/<R>~twin-><R>/graft-twin/<counter>`.

Both read GRAFT's options and declare none of their own, and each overrides one of GRAFT's
public hooks: the shuffled peer `peer_group`, the twin `peer_sources` (where a receiver's
groups come from); scoring, weighting and the transferred groups are GRAFT's.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from algorithms.exchange.base import register_strategy
from algorithms.exchange.graft import Direction, GraftExchange
from algorithms.exchange.peer_group import PeerGroup
from algorithms.exchange.resample import Resample, ResamplingScorer
from algorithms.exchange.stats import ExchangeStats
from graft_env.types import AgentRollouts, Scorer

SHUFFLE_STREAM = 39  # the spawn-key tag of the shuffled-reward permutations
TWIN_MAX_ROUNDS = 8
"""Resample rounds per step at most (each: n responses on every gated prompt not yet filled)."""
TWIN_SUFFIX = "~twin"  # the twin's source name in transfers and stats: "<receiver>~twin"


def permuted_rewards(rewards: np.ndarray, seed: np.random.SeedSequence) -> np.ndarray:
    """One group's rewards [n] in the order of a uniform random permutation from `seed`."""
    return rewards[np.random.default_rng(seed).permutation(rewards.shape[0])]


def permutation_seed(
    root: np.random.SeedSequence, receiver: str, prompt: int
) -> np.random.SeedSequence:
    """The seed of one transferred group's permutation: `root` (the step stream's seed)
    extended by (SHUFFLE_STREAM, CRC-32 of the receiver's name, prompt index); `root` is not
    advanced."""
    key = (*root.spawn_key, SHUFFLE_STREAM, zlib.crc32(receiver.encode()), prompt)
    return np.random.SeedSequence(entropy=root.entropy, spawn_key=key)


def with_groups(
    rollouts: AgentRollouts,
    replaced: Mapping[int, tuple[AgentRollouts, int]],
    advantages: Callable[[np.ndarray], np.ndarray],
) -> AgentRollouts:
    """`rollouts` with prompt p's group taken from group j of `replaced[p] = (other, j)`, its
    advantages `advantages(rewards)` (Eq.1 over that group), the other prompts' kept. The
    result is a source's view (what a receiver is sent): no rollout-correction fields."""
    texts, token_ids = list(rollouts.texts), list(rollouts.token_ids)
    logprobs, reasons = list(rollouts.logprobs), list(rollouts.finish_reasons)
    rewards = rollouts.rewards.copy()
    filled = np.zeros_like(rewards) if rollouts.advantages is None else rollouts.advantages
    filled = np.asarray(filled, dtype=np.float64).copy()
    for p, (other, j) in replaced.items():
        texts[p], token_ids[p] = other.texts[j], other.token_ids[j]
        logprobs[p], reasons[p] = other.logprobs[j], other.finish_reasons[j]
        rewards[p] = other.rewards[j]
        filled[p] = advantages(rewards[p])
    return dataclasses.replace(
        rollouts,
        texts=texts,
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reasons=reasons,
        rewards=rewards,
        advantages=filled,
        train_logprobs=None,
        rollout_weights=None,
    )


@dataclasses.dataclass(frozen=True)
class TwinDraw:
    """What the twin's resampling of one receiver's gated prompts gave."""

    groups: dict[int, tuple[AgentRollouts, int]]  # filled prompt -> (round's rollouts, row)
    rounds: int
    drawn: int  # responses sampled, kept or not


def twin_draw(
    receiver: str, gated: Sequence[int], resample: Resample, n: int, max_rounds: int
) -> TwinDraw:
    """Resample the gated prompts not yet filled, round 1, 2, ... `max_rounds`, keeping each
    prompt's first informative group (0 < k < n); stops when every prompt is filled."""
    pending, groups, rounds, drawn = list(gated), {}, 0, 0
    while pending and rounds < max_rounds:
        rounds += 1
        extra = resample(receiver, pending, rounds)
        if extra.rewards.shape != (len(pending), n):
            raise ValueError(
                f"resample({receiver!r}, round {rounds}) returned rewards of shape "
                f"{extra.rewards.shape}, expected {(len(pending), n)}"
            )
        drawn += int(extra.rewards.size)
        for j, p in enumerate(pending):
            if 0 < extra.k[j] < n:
                groups[p] = (extra, j)
        pending = [p for p in pending if p not in groups]
    return TwinDraw(groups, rounds, drawn)


@register_strategy("graft-shuffled")
class ShuffledRewardExchange(GraftExchange):
    """GRAFT with each transferred group's rewards permuted within the group."""

    def peer_group(
        self, group: PeerGroup, rng: np.random.Generator, stats: ExchangeStats
    ) -> PeerGroup:
        """The group with its rewards permuted (`permutation_seed` from the step stream's
        seed, the receiver and the prompt); counts the responses whose reward moved."""
        seed = permutation_seed(rng.bit_generator.seed_seq, group.receiver, group.prompt_index)
        rewards = permuted_rewards(group.rewards, seed)
        moved = float(np.count_nonzero(rewards != group.rewards))
        stats.count("rewards_moved", moved, group.source, group.receiver)
        return dataclasses.replace(group, rewards=rewards)


@register_strategy("graft-twin")
class TwinPeerExchange(GraftExchange):
    """GRAFT's gate decides how many prompts; the receiver's own re-sampling fills them."""

    def peer_sources(
        self,
        receiver: str,
        plan: dict[Direction, np.ndarray],
        rollouts: Mapping[str, AgentRollouts],
        scorer: Scorer,
        stats: ExchangeStats,
    ) -> tuple[Mapping[str, AgentRollouts], dict[Direction, np.ndarray]]:
        """The receiver's twin as the only source: the prompts the gate planned for it,
        resampled (`twin_draw`) until informative, under the source name `<receiver>~twin`."""
        if not isinstance(scorer, ResamplingScorer):
            raise ValueError(
                f"exchange={self.name!r} resamples the receiver and needs the training loop's "
                f"ResamplingScorer (algorithms.exchange.resample); got {type(scorer).__name__}"
            )
        gated = sorted(int(p) for (_, r), ps in plan.items() if r == receiver for p in ps)
        draw = twin_draw(receiver, gated, scorer.resample, self.config.n, TWIN_MAX_ROUNDS)
        twin = f"{receiver}{TWIN_SUFFIX}"
        own = dataclasses.replace(rollouts[receiver], agent=twin)
        for name, value in (
            ("gated_prompts", len(gated)),
            ("filled_prompts", len(draw.groups)),
            ("rounds", draw.rounds),
            ("resampled_responses", draw.drawn),
        ):
            stats.count(name, float(value), twin, receiver)
        view = {**rollouts, twin: with_groups(own, draw.groups, self.group_advantages)}
        return view, {(twin, receiver): np.array(sorted(draw.groups), dtype=np.int64)}
