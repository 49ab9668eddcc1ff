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
    compatibility_scores,
    compatibility_weights,
    exchange_candidates,
    group_advantages,
    normalised_loglik,
    random_admission,
    random_prompt_selection,
    select_exchange,
    select_exchange_multi,
)
from algorithms.core.selection import CANDIDATE_RULES
from algorithms.core.weights import LOGLIK_MODES
from algorithms.exchange.base import (
    ExchangeResult,
    ExchangeStrategy,
    filled_advantages,
    register_strategy,
    score_texts,
)
from algorithms.exchange.stats import ExchangeStats
from graft_env.schema import Flag, Fraction, require
from graft_env.types import AgentRollouts, ScoredText, Scorer, TransferredGroup

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
                "Peer data comes from a stored trajectory log (SPEC §9): one-way, no balancing."
            )
        },
    )


@register_strategy("graft")
class GraftExchange(ExchangeStrategy):
    """The GRAFT gate with every §7 ablation as an option."""

    options = GraftOptions

    def check_options(self, where: str) -> None:
        """The shared rules, and option sets of GRAFT's that would silently do something
        other than they say."""
        super().check_options(where)
        cfg = self.config
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
            raise require(
                where, "balance", True, "False with stored=True (a stored log is one-way, SPEC §9)"
            )
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
        stats = ExchangeStats(strategy=self.name)
        plan = self._select_prompts(rollouts, receivers, rng, stats)
        transfers = {
            receiver: self._transfer(receiver, plan, rollouts, scorer, rng, stats)
            for receiver in receivers
        }
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
        pooled_prompts: set[int] = set()
        for group in transfers:
            if group.prompt_index in pooled_prompts:
                raise ValueError(
                    f"receiver {receiver!r} got prompt {group.prompt_index} from two sources; "
                    "pooling is defined for one source group per prompt"
                )
            pooled_prompts.add(group.prompt_index)
            pooled = self._pooled_advantages(
                rollouts[receiver], rollouts[group.source], group.prompt_index
            )
            advantages[group.prompt_index] = pooled[: self.config.n]
        return advantages

    # --- §2: which prompts ----------------------------------------------------------------

    def _select_prompts(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        rng: np.random.Generator,
        stats: ExchangeStats,
    ) -> dict[Direction, np.ndarray]:
        cfg = self.config
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
            direction.gate_candidates = int(
                exchange_candidates(k[s], k[r], cfg.n, cfg.candidates).size
            )
            if cfg.selection == "random_prompts":
                # Same count, uniformly among the receiver's all-fail prompts that no other
                # source already fills: taken prompts are marked as not all-fail (k = 1).
                available_k = k[r].copy()
                available_k[taken.get(receiver, np.empty(0, dtype=np.int64))] = 1
                prompts = random_prompt_selection(available_k, int(prompts.size), rng)
                taken[receiver] = np.concatenate([taken.get(receiver, prompts[:0]), prompts])
            direction.selected_prompts = [int(p) for p in prompts]
            plan[(source, receiver)] = prompts
        return plan

    # --- §3-§4: what moves and how much it counts -------------------------------------------

    def _transfer(
        self,
        receiver: str,
        plan: Mapping[Direction, np.ndarray],
        rollouts: Mapping[str, AgentRollouts],
        scorer: Scorer,
        rng: np.random.Generator,
        stats: ExchangeStats,
    ) -> list[TransferredGroup]:
        n = self.config.n
        items = [
            (source, int(p))
            for (source, recv), prompts in plan.items()
            if recv == receiver
            for p in prompts
        ]
        prompt_indices = [p for _, p in items for _ in range(n)]
        texts = [text for source, p in items for text in rollouts[source].texts[p]]
        reasons = [r for source, p in items for r in rollouts[source].finish_reasons[p]]
        scored = score_texts(scorer, receiver, prompt_indices, texts, reasons)
        group_scored = [scored[j * n : (j + 1) * n] for j in range(len(items))]
        logliks = np.array(
            [self._logliks(rollouts[s], p, group_scored[j]) for j, (s, p) in enumerate(items)]
        ).reshape(len(items), 2, n)  # [G, 2, n]; without the reshape no items would give [0]
        scores = compatibility_scores(logliks[:, 0], logliks[:, 1])
        rewards = np.array([rollouts[source].rewards[p] for source, p in items]).reshape(-1, n)
        weights = np.zeros((len(items), n))
        for unit in self._admission_units(items):
            weights[unit] = self._weights(scores[unit], rewards[unit], rng)
        groups = []
        for j, (source, p) in enumerate(items):
            removed_failures = np.count_nonzero(rewards[j] <= 0) if self.config.success_only else 0
            stats.direction(source, receiver).record(scores[j], weights[j], int(removed_failures))
            groups.append(
                self._group(rollouts[receiver], rollouts[source], p, group_scored[j], weights[j])
            )
        return groups

    def _admission_units(self, items: Sequence[tuple[str, int]]) -> list[list[int]]:
        """Rows of `items` that share one admission draw: each transferred group
        (admission_match='group'), or every group of one direction this step ('direction',
        App. F: the random control matches the floor's count "separately in each direction").
        Only random admission draws; the other weights are per response either way."""
        if self.config.admission_match == "group":
            return [[j] for j in range(len(items))]
        by_source: dict[str, list[int]] = {}
        for j, (source, _) in enumerate(items):
            by_source.setdefault(source, []).append(j)
        return list(by_source.values())

    def _logliks(
        self, source: AgentRollouts, p: int, scored: list[ScoredText]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Normalised log-likelihoods (receiver's re-scoring, source's generation) of a group."""
        mode = self.config.compat_norm
        texts = source.texts[p]
        receiver_ll = [
            normalised_loglik(s.logprobs, t, mode) for s, t in zip(scored, texts, strict=True)
        ]
        source_ll = [
            normalised_loglik(lp, t, mode) for lp, t in zip(source.logprobs[p], texts, strict=True)
        ]
        return np.array(receiver_ll), np.array(source_ll)

    def _weights(
        self, scores: np.ndarray, rewards: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Weights w [G, n] of the G groups of one admission unit (`_admission_units`),
        from their compatibility scores s [G, n]."""
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

    def _group(
        self,
        receiver: AgentRollouts,
        source: AgentRollouts,
        p: int,
        scored: list[ScoredText],
        weights: np.ndarray,
    ) -> TransferredGroup:
        """One transferred group: the source's whole group with its advantages and `weights`."""
        cfg = self.config
        group = TransferredGroup(
            prompt_index=p,
            source=source.agent,
            response_indices=np.arange(cfg.n),
            texts=list(source.texts[p]),
            advantages=filled_advantages(source)[p].copy(),
            weights=weights.copy(),
            scored=scored,
            clip=cfg.peer_clip,
        )
        if cfg.pooled:
            group.advantages = self._pooled_advantages(receiver, source, p)[cfg.n :]
        return group

    def _pooled_advantages(
        self, receiver: AgentRollouts, source: AgentRollouts, p: int
    ) -> np.ndarray:
        """Advantages over the 2n pooled rewards of prompt p: receiver's group, then source's."""
        rewards = np.concatenate([receiver.rewards[p], source.rewards[p]])[None, :]
        cfg = self.config
        return group_advantages(rewards, eps=cfg.adv_eps, scale=cfg.adv_scale, ddof=cfg.adv_ddof)[0]
