"""GRAFT's exchange: the gate, balancing, whole-group transfer and compatibility weights.

Reads like GRAFT-SPEC §2-§4:
1. Which prompts (§2): C_{S->R} = {q : k_R(q) = 0 and 1 <= k_S(q) < n}, balanced with
   ties (`select_exchange`; N > 2 agents: `select_exchange_multi`, the §8 extension,
   agents indexed in the order of the `rollouts` mapping). `stored` runs are
   one-way and unbalanced (§9: the config requires balance=False).
   candidates='any_success' (graft-no-balance, the paper's App. G row) keeps SGT's
   k_S >= 1, so all-pass source groups move too.
2. What moves (§3): the source's whole group, successes and failures, with the
   advantages the source computed over its own group.
3. How much it counts (§4): s = exp(l_R - l_S) with l_R from the receiver's
   re-scoring and l_S from the source's stored generation log-probs (the source
   model is never re-run); w = 1[s > delta] min(s, 1), every response admitted when
   delta = 0 (`admitted_by_floor`). Removed responses stay in the group with w = 0
   so they are counted; batch building drops them. Advantages are never
   re-normalised over what is left (§3): a removed response takes its share of the
   source's group statistics with it.

Variants subclass it and override its public hooks, in step order `gate`, `plan_prompts`,
`peer_sources`, `peer_group`, `rank_groups`, `weigh` (CONTRIBUTING.md, "Building on GRAFT"),
reading and setting every GRAFT option.

Ablations are options of this one strategy: selection='random_prompts', balance,
candidates, compat, delta, admission='random' (count matched per direction or per
group: admission_match), success_only, pooled, stored (`GraftOptions`), and the shared
peer_clip (SPEC §7).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from algorithms.core import (
    admitted_by_floor,
    compatibility_weights,
    group_advantages,
    random_admission,
)
from algorithms.core.selection import CANDIDATE_RULES
from algorithms.core.weights import LOGLIK_MODES
from algorithms.exchange.base import (
    ExchangeResult,
    ExchangeStrategy,
    filled_advantages,
    register_strategy,
)
from algorithms.exchange.graft_steps import (
    admission_units,
    check_groups,
    check_option_conflicts,
    gate_plan,
    scored_groups,
)
from algorithms.exchange.peer_group import PeerGroup
from algorithms.exchange.stats import ExchangeStats
from graft_env.schema import Flag, Fraction
from graft_env.types import AgentRollouts, Scorer, TransferredGroup

Direction = tuple[str, str]
SELECTION_MODES = ("gate", "random_prompts")
ADMISSION_MODES = ("compat", "random")
ADMISSION_MATCHES = ("direction", "group")


@dataclass(frozen=True)
class GraftOptions:
    """The options of the GRAFT strategy and its §7 ablations (merged into AlgorithmConfig)."""

    selection: Literal[SELECTION_MODES] = field(
        default="gate",
        metadata={
            "help": (
                "'gate': Eq.4 candidates; 'random_prompts': same count, uniform among all-fail."
            )
        },
    )
    candidates: Literal[CANDIDATE_RULES] = field(
        default="informative",
        metadata={
            "help": (
                "Gate candidates C_{S->R}: 'informative' (Eq.4: k_R = 0 and 1 <= k_S < n); "
                "'any_success' (SGT's eligibility: k_R = 0 and k_S >= 1, all-pass source groups "
                "included; they carry zero advantage: the paper's no-balance row, App. G)."
            )
        },
    )
    balance: Flag = field(
        default=True,
        metadata={"help": "Balanced exchange with ties (Alg.1); False transfers every candidate."},
    )
    compat: Flag = field(
        default=True,
        metadata={"help": "Weight transferred responses by w = 1[s > delta] min(s, 1)."},
    )
    delta: Fraction = field(
        default=0.8,
        metadata={"help": "Compatibility floor: responses with s <= delta are removed."},
    )
    compat_norm: Literal[LOGLIK_MODES] = field(
        default="token",
        metadata={
            "help": "Length normalisation of log-likelihoods in s: 'token' (paper) or 'char'."
        },
    )
    admission: Literal[ADMISSION_MODES] = field(
        default="compat",
        metadata={
            "help": (
                "'compat': floor decides; 'random': as many responses as the floor admits per "
                "direction and step (see admission_match) admitted at random, w = min(s, 1)."
            )
        },
    )
    admission_match: Literal[ADMISSION_MATCHES] = field(
        default="direction",
        metadata={
            "help": (
                "admission='random': match the floor's admitted count per 'direction' and step "
                "(App. F, Table 7: the paper's form) or per transferred 'group', a finer control: "
                "it matches the floor group by group, so it isolates which responses are admitted "
                "from how many each prompt gets."
            )
        },
    )
    success_only: Flag = field(
        default=False,
        metadata={
            "help": "Remove failed source responses from transferred groups (weight 0; counted)."
        },
    )
    pooled: Flag = field(
        default=False,
        metadata={
            "help": (
                "Keep the receiver's group and pool it with the source group; advantages over 2n."
            )
        },
    )
    stored: Flag = field(
        default=False,
        metadata={
            "help": (
                "Peer data comes from a stored trajectory log (the paper's §6.2): one-way, "
                "no balancing."
            )
        },
    )


@register_strategy("graft")
class GraftExchange(ExchangeStrategy):
    """The GRAFT gate with every ablation of the paper's Table 2 as an option."""

    options = GraftOptions

    def check_options(self, where: str) -> None:
        """The shared rules, and option sets of GRAFT's that would silently do something
        other than they say."""
        super().check_options(where)
        check_option_conflicts(self.config, where)

    @property
    def replaces_own_groups(self) -> bool:
        return not self.config.pooled

    def select(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        scorer: Scorer,
        rng: np.random.Generator,
    ) -> ExchangeResult:
        """gate -> plan_prompts -> per receiver: peer_sources, peer_group, scoring,
        rank_groups, weigh."""
        stats = ExchangeStats(strategy=self.name)
        plan = self.plan_prompts(self.gate(rollouts, receivers, rng, stats), rollouts, rng, stats)
        transfers = {}
        for receiver in receivers:
            view, own_plan = self.peer_sources(receiver, plan, rollouts, scorer, stats)
            moving = self._moving_groups(receiver, own_plan, view, scorer, rng, stats)
            transfers[receiver] = self._transfer(receiver, moving, view, rng, stats)
        return ExchangeResult(transfers, stats)

    def own_advantages(
        self,
        receiver: str,
        rollouts: Mapping[str, AgentRollouts],
        transfers: Sequence[TransferredGroup],
    ) -> np.ndarray:
        """Pooled runs re-normalise the receiver's group together with the source's (2n)."""
        advantages = filled_advantages(rollouts[receiver]).copy()
        if not self.config.pooled:
            return advantages
        prompts = [group.prompt_index for group in transfers]
        if len(set(prompts)) != len(prompts):
            raise ValueError(
                f"receiver {receiver!r} got a prompt from two sources (prompts {prompts}); "
                "pooling is defined for one source group per prompt"
            )
        for group in transfers:
            own, peer = (rollouts[a].rewards[group.prompt_index] for a in (receiver, group.source))
            advantages[group.prompt_index] = self._pooled_advantages(own, peer)[: self.config.n]
        return advantages

    # --- §2: which prompts ----------------------------------------------------------------

    def gate(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        rng: np.random.Generator,
        stats: ExchangeStats,
    ) -> dict[Direction, np.ndarray]:
        """§2: the prompts each (source, receiver) direction would move, by Eq.4's gate with
        balancing and ties (or `selection`'s control); fills each direction's candidate
        counts in `stats`."""
        return gate_plan(rollouts, receivers, self.config, rng, stats)

    # --- the extension points (CONTRIBUTING: "Building on GRAFT") ----------------------------

    def plan_prompts(
        self,
        plan: dict[Direction, np.ndarray],
        rollouts: Mapping[str, AgentRollouts],
        rng: np.random.Generator,
        stats: ExchangeStats,
    ) -> dict[Direction, np.ndarray]:
        """Hook after the gate: the prompts that move, per (source, receiver) direction.
        Default: the gate's plan unchanged. Each direction's `selected_prompts` are recorded
        from what finally moves (after `rank_groups`), not from this plan."""
        return plan

    def peer_sources(
        self,
        receiver: str,
        plan: dict[Direction, np.ndarray],
        rollouts: Mapping[str, AgentRollouts],
        scorer: Scorer,
        stats: ExchangeStats,
    ) -> tuple[Mapping[str, AgentRollouts], dict[Direction, np.ndarray]]:
        """Hook per receiver, after `plan_prompts`: where its groups come from, as the rollouts
        they are read from and the plan over them. A source may be one the step did not
        sample (the twin control's receiver resampling itself through `scorer`); its rollouts
        then need the receiver's shape and filled advantages. The returned rollouts must still
        hold the receiver's own (`_transfer` reads `rollouts[receiver]`). Default: every
        agent's rollouts and the plan."""
        return rollouts, plan

    def peer_group(
        self, group: PeerGroup, rng: np.random.Generator, stats: ExchangeStats
    ) -> PeerGroup:
        """Hook on each planned group before the receiver scores it and before its
        advantages are computed (from `group.rewards`); return it, or a changed copy
        (`dataclasses.replace`: other texts with their generation log-probs and finish
        reasons, other rewards; not with pooled=True, whose 2n pool is the source's own
        rewards). Default: the source's group unchanged."""
        return group

    def rank_groups(
        self, receiver: str, groups: list[PeerGroup], stats: ExchangeStats
    ) -> list[PeerGroup]:
        """Hook between scoring and weighting: the receiver's groups that move, each with its
        `scores` s [n] filled. Return a sub-list (any order; each group at most once).
        Default: all of them."""
        return groups

    def weigh(
        self, scores: np.ndarray, rewards: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Weighting step (§4): weights w [G, n] of the G groups of one admission unit (every
        group of one direction, or each group: `admission_match`) from their scores s [G, n]
        and rewards [G, n]: 1[s > delta] min(s, 1), or `compat` / `admission` /
        `success_only`'s variant."""
        cfg = self.config
        if not cfg.compat:
            weights = np.ones(rewards.shape)
        elif cfg.admission == "random":
            count = int(np.count_nonzero(admitted_by_floor(scores, cfg.delta)))
            weights = random_admission(scores, count, rng)
        else:
            weights = compatibility_weights(scores, cfg.delta)
        if cfg.success_only:
            weights = np.where(rewards > 0, weights, 0.0)
        return weights

    def group_advantages(self, rewards: np.ndarray) -> np.ndarray:
        """Eq.1 advantages [n] of one group's rewards [n], with this config's eps, scale and
        ddof: what a transferred group whose rewards a hook changed gets."""
        cfg = self.config
        return group_advantages(
            np.asarray(rewards, dtype=np.float64)[None, :],
            eps=cfg.adv_eps,
            scale=cfg.adv_scale,
            ddof=cfg.adv_ddof,
        )[0]

    # --- §3-§4: what moves and how much it counts -------------------------------------------

    def _transfer(
        self,
        receiver: str,
        groups: list[PeerGroup],
        rollouts: Mapping[str, AgentRollouts],
        rng: np.random.Generator,
        stats: ExchangeStats,
    ) -> list[TransferredGroup]:
        """The moving groups of one receiver weighed (`weigh`), counted and built."""
        n = self.config.n
        rewards = np.array([g.rewards for g in groups], dtype=np.float64).reshape(-1, n)
        scores = np.array([g.scores for g in groups], dtype=np.float64).reshape(-1, n)
        weights = np.zeros((len(groups), n))
        for unit in admission_units([g.source for g in groups], self.config.admission_match):
            weights[unit] = self.weigh(scores[unit], rewards[unit], rng)
        transferred = []
        for j, group in enumerate(groups):
            removed_failures = np.count_nonzero(rewards[j] <= 0) if self.config.success_only else 0
            direction = stats.direction(group.source, receiver)
            direction.record(scores[j], weights[j], int(removed_failures))
            transferred.append(
                self._group(rollouts[receiver], rollouts[group.source], group, weights[j])
            )
        for (source, recv), direction in stats.directions.items():
            if recv == receiver:
                direction.selected_prompts = [g.prompt_index for g in groups if g.source == source]
        return transferred

    def _moving_groups(
        self,
        receiver: str,
        plan: Mapping[Direction, np.ndarray],
        rollouts: Mapping[str, AgentRollouts],
        scorer: Scorer,
        rng: np.random.Generator,
        stats: ExchangeStats,
    ) -> list[PeerGroup]:
        """The receiver's planned groups through `peer_group`, scoring and `rank_groups`."""
        planned = [
            self.peer_group(PeerGroup.of(rollouts[source], receiver, int(p)), rng, stats)
            for (source, recv), prompts in plan.items()
            if recv == receiver
            for p in prompts
        ]
        cfg = self.config
        check_groups(self.name, "plan_prompts (or peer_group)", planned)
        scored = scored_groups(receiver, planned, scorer, cfg.n, cfg.compat_norm)
        return check_groups(self.name, "rank_groups", self.rank_groups(receiver, scored, stats))

    def _group(
        self, receiver: AgentRollouts, source: AgentRollouts, group: PeerGroup, weights: np.ndarray
    ) -> TransferredGroup:
        """One transferred group: the group's responses with their advantages and `weights`.
        Advantages are the source's own (§3) unless a hook changed the rewards (then Eq.1 over
        the new rewards); pooled runs take the source half of the 2n pooled advantages."""
        cfg, p = self.config, group.prompt_index
        own_rewards = np.array_equal(group.rewards, source.rewards[p])
        if cfg.pooled and not own_rewards:
            raise ValueError(
                f"strategy {self.name!r}: peer_group changed the rewards of prompt {p} from "
                f"{group.source!r}, but pooled=True pools the receiver's group with the source's "
                "own rewards (its own_advantages); keep the rewards or set pooled=False"
            )
        if cfg.pooled:
            advantages = self._pooled_advantages(receiver.rewards[p], group.rewards)[cfg.n :]
        elif own_rewards:
            advantages = filled_advantages(source)[p].copy()
        else:
            advantages = self.group_advantages(group.rewards)
        return TransferredGroup(
            prompt_index=p,
            source=group.source,
            response_indices=np.arange(cfg.n),
            texts=list(group.texts),
            advantages=advantages,
            weights=weights.copy(),
            scored=list(group.scored),
            clip=cfg.peer_clip,
        )

    def _pooled_advantages(self, own_rewards: np.ndarray, peer_rewards: np.ndarray) -> np.ndarray:
        """Advantages over the 2n pooled rewards of one prompt: receiver's group, then source's."""
        return self.group_advantages(np.concatenate([own_rewards, peer_rewards]))
