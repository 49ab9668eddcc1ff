"""The peer controls of the gap study's second part (issue 39,
docs/study/GAP-CONTROLS-PREREGISTRATION.md): GRAFT with the peer's information removed.

- "graft-shuffled" (shuffled-reward peer): GRAFT exactly (gate, balancing, whole groups,
  compatibility weights), but each transferred group's rewards are permuted within the
  group before its advantages are computed: the peer's traces and token counts move, the
  information of which of them are right does not. Each group's permutation is seeded from
  the step's random stream's seed (the run's seed and step), the receiver and the prompt,
  without drawing from that stream, so everything else GRAFT draws is as in GRAFT.
- "graft-twin" (twin peer): GRAFT's gate against the real peer decides which prompts would
  move this step (`C_{S->R}`, balanced); the receiver then answers those prompts again
  itself (`ResamplingScorer.resample`: its own weights, its own sampling seed per round),
  round after round (at most `TWIN_MAX_ROUNDS`) until each has an informative group
  (0 < k < n) or the rounds are spent; each informative group replaces the receiver's
  all-fail group as a peer group would, weighted by GRAFT's weights (s from the receiver
  re-scoring its own traces). Nothing moves from the real peer. Per receiver and step the
  strategy logs how many prompts GRAFT would have moved (`twin/<R>/gated_prompts`), how
  many the twin filled (`twin/<R>/filled_prompts`), the rounds and the responses drawn.

Both read GRAFT's options and declare none of their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from algorithms.core import group_advantages
from algorithms.exchange.base import ExchangeResult, register_strategy
from algorithms.exchange.graft import GraftExchange
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
    root: np.random.SeedSequence, receiver: int, prompt: int
) -> np.random.SeedSequence:
    """The seed of one transferred group's permutation: `root` (the step stream's seed)
    extended by (SHUFFLE_STREAM, receiver index, prompt index); `root` is not advanced."""
    return np.random.SeedSequence(
        entropy=root.entropy, spawn_key=(*root.spawn_key, SHUFFLE_STREAM, receiver, prompt)
    )


def with_groups(
    rollouts: AgentRollouts,
    replaced: Mapping[int, tuple[AgentRollouts, int]],
    rewards: Mapping[int, np.ndarray],
    advantage_options: Mapping[str, object],
) -> AgentRollouts:
    """`rollouts` with prompt p's group taken from group j of `replaced[p] = (other, j)`,
    and prompt p's rewards set to `rewards[p]`; advantages are recomputed for the prompts
    either names (`group_advantages` with `advantage_options`), kept elsewhere. The result is
    a source's view (what a receiver is sent), so it carries no rollout-correction fields."""
    texts, token_ids = list(rollouts.texts), list(rollouts.token_ids)
    logprobs, reasons = list(rollouts.logprobs), list(rollouts.finish_reasons)
    new_rewards = rollouts.rewards.copy()
    for p, (other, j) in replaced.items():
        texts[p], token_ids[p] = other.texts[j], other.token_ids[j]
        logprobs[p], reasons[p] = other.logprobs[j], other.finish_reasons[j]
        new_rewards[p] = other.rewards[j]
    for p, values in rewards.items():
        new_rewards[p] = values
    advantages = np.zeros_like(new_rewards) if rollouts.advantages is None else rollouts.advantages
    advantages = np.asarray(advantages, dtype=np.float64).copy()
    changed = sorted({*replaced, *rewards})
    if changed:
        advantages[changed] = group_advantages(new_rewards[changed], **advantage_options)
    return dataclasses.replace(
        rollouts,
        texts=texts,
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reasons=reasons,
        rewards=new_rewards,
        advantages=advantages,
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


class _GraftControl(GraftExchange):
    """GRAFT's gate and transfer, the control deciding what the receiver's peer data is.

    It declares no options of its own; GRAFT's are read at their values, which (until a
    strategy may set its base's options) are GRAFT's defaults."""

    options = None

    def _advantage_options(self) -> dict[str, object]:
        cfg = self.config
        return {"eps": cfg.adv_eps, "scale": cfg.adv_scale, "ddof": cfg.adv_ddof}


@register_strategy("graft-shuffled")
class ShuffledRewardExchange(_GraftControl):
    """GRAFT with each transferred group's rewards permuted within the group."""

    def select(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        scorer: Scorer,
        rng: np.random.Generator,
    ) -> ExchangeResult:
        stats = ExchangeStats(strategy=self.name)
        plan = self._select_prompts(rollouts, receivers, rng, stats)
        root, agents = rng.bit_generator.seed_seq, list(rollouts)
        transfers = {}
        for receiver in receivers:
            view, moved = dict(rollouts), 0
            for (source, recv), prompts in plan.items():
                if recv != receiver:
                    continue
                own = rollouts[source]
                permuted = {
                    int(p): permuted_rewards(
                        own.rewards[p], permutation_seed(root, agents.index(receiver), int(p))
                    )
                    for p in prompts
                }
                moved += sum(
                    int(np.count_nonzero(v != own.rewards[p])) for p, v in permuted.items()
                )
                view[source] = with_groups(own, {}, permuted, self._advantage_options())
            transfers[receiver] = self._transfer(receiver, plan, view, scorer, rng, stats)
            stats.extra[f"shuffled/{receiver}/rewards_moved"] = float(moved)
        return ExchangeResult(transfers, stats)


@register_strategy("graft-twin")
class TwinPeerExchange(_GraftControl):
    """GRAFT's gate decides how many prompts; the receiver's own re-sampling fills them."""

    def select(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        scorer: Scorer,
        rng: np.random.Generator,
    ) -> ExchangeResult:
        if not isinstance(scorer, ResamplingScorer):
            raise ValueError(
                f"exchange={self.name!r} resamples the receiver and needs the training loop's "
                f"ResamplingScorer (algorithms.exchange.resample); got {type(scorer).__name__}"
            )
        stats = ExchangeStats(strategy=self.name)
        plan = self._select_prompts(rollouts, receivers, rng, stats)
        transfers = {}
        for receiver in receivers:
            gated = sorted(int(p) for (_, r), ps in plan.items() if r == receiver for p in ps)
            for source, recv in plan:
                if recv == receiver:  # the gate's count is kept; nothing moves from the peer
                    stats.direction(source, recv).selected_prompts = []
            draw = twin_draw(receiver, gated, scorer.resample, self.config.n, TWIN_MAX_ROUNDS)
            twin = f"{receiver}{TWIN_SUFFIX}"
            own = dataclasses.replace(rollouts[receiver], agent=twin)
            view = {
                **rollouts,
                twin: with_groups(own, draw.groups, {}, self._advantage_options()),
            }
            twin_plan = {(twin, receiver): np.array(sorted(draw.groups), dtype=np.int64)}
            transfers[receiver] = self._transfer(receiver, twin_plan, view, scorer, rng, stats)
            stats.direction(twin, receiver).selected_prompts = sorted(draw.groups)
            stats.extra.update(
                {
                    f"twin/{receiver}/gated_prompts": float(len(gated)),
                    f"twin/{receiver}/filled_prompts": float(len(draw.groups)),
                    f"twin/{receiver}/rounds": float(draw.rounds),
                    f"twin/{receiver}/resampled_responses": float(draw.drawn),
                }
            )
        return ExchangeResult(transfers, stats)
