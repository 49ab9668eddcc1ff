"""GRAFT's exchange: the gate, balancing, whole-group transfer and compatibility weights.

Reads like GRAFT-SPEC §2-§4:
1. Which prompts (§2): C_{S->R} = {q : k_R(q) = 0 and 1 <= k_S(q) < n}, balanced with
   ties (`select_exchange`; N > 2 agents: `select_exchange_multi`, the §8 extension,
   agents indexed in the order of the `rollouts` mapping). `stored` runs are
   one-way and unbalanced (§9: the config requires balance=False).
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
compat, delta, admission='random', success_only, pooled, peer_clip (SPEC §7).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
from algorithms.exchange.base import (
    ExchangeStrategy,
    check_exchange_inputs,
    filled_advantages,
    register_strategy,
    score_texts,
)
from algorithms.exchange.stats import ExchangeStats
from algorithms.types import AgentRollouts, ScoredText, Scorer, TransferredGroup

Direction = tuple[str, str]


@register_strategy("graft")
class GraftExchange(ExchangeStrategy):
    """The GRAFT gate with every §7 ablation as an option."""

    @property
    def replaces_own_groups(self) -> bool:
        return not self.config.pooled

    def __call__(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        scorer: Scorer,
        rng: np.random.Generator,
    ) -> dict[str, list[TransferredGroup]]:
        check_exchange_inputs(rollouts, receivers, self.config.n)
        stats = ExchangeStats(strategy=self.name)
        plan = self._select_prompts(rollouts, receivers, rng, stats)
        transfers = {
            receiver: self._transfer(receiver, plan, rollouts, scorer, rng, stats)
            for receiver in receivers
        }
        self.last_stats = stats
        return transfers

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
                return select_exchange_multi(k, cfg.n, balance=balance)
            a_to_b, b_to_a = select_exchange(k[0], k[1], cfg.n, balance=balance)
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
            direction.gate_candidates = int(exchange_candidates(k[s], k[r], cfg.n).size)
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
        scored = score_texts(scorer, receiver, prompt_indices, texts)
        groups = []
        for j, (source, p) in enumerate(items):
            group_scored = scored[j * n : (j + 1) * n]
            group, scores = self._group(rollouts[receiver], rollouts[source], p, group_scored, rng)
            failures = np.count_nonzero(rollouts[source].rewards[p] <= 0)
            removed_failures = int(failures) if self.config.success_only else 0
            stats.direction(source, receiver).record(scores, group.weights, removed_failures)
            groups.append(group)
        return groups

    def _group(
        self,
        receiver: AgentRollouts,
        source: AgentRollouts,
        p: int,
        scored: list[ScoredText],
        rng: np.random.Generator,
    ) -> tuple[TransferredGroup, np.ndarray]:
        """One transferred group and the compatibility scores s of its responses."""
        cfg = self.config
        mode = cfg.compat_norm
        texts = source.texts[p]
        receiver_ll = np.array(
            [normalised_loglik(s.logprobs, t, mode) for s, t in zip(scored, texts, strict=True)]
        )
        source_ll = np.array(
            [
                normalised_loglik(lp, t, mode)
                for lp, t in zip(source.logprobs[p], texts, strict=True)
            ]
        )
        scores = compatibility_scores(receiver_ll, source_ll)
        if not cfg.compat:
            weights = np.ones(cfg.n)
        elif cfg.admission == "random":
            count = int(np.count_nonzero(admitted_by_floor(scores, cfg.delta)))
            weights = random_admission(scores, count, rng)
        else:
            weights = compatibility_weights(receiver_ll, source_ll, cfg.delta)
        if cfg.success_only:
            weights = np.where(source.rewards[p] > 0, weights, 0.0)
        group = TransferredGroup(
            prompt_index=p,
            source=source.agent,
            response_indices=np.arange(cfg.n),
            texts=list(texts),
            advantages=filled_advantages(source)[p].copy(),
            weights=weights,
            scored=scored,
            clip=cfg.peer_clip,
        )
        if cfg.pooled:
            group.advantages = self._pooled_advantages(receiver, source, p)[cfg.n :]
        return group, scores

    def _pooled_advantages(
        self, receiver: AgentRollouts, source: AgentRollouts, p: int
    ) -> np.ndarray:
        """Advantages over the 2n pooled rewards of prompt p: receiver's group, then source's."""
        rewards = np.concatenate([receiver.rewards[p], source.rewards[p]])[None, :]
        cfg = self.config
        return group_advantages(rewards, eps=cfg.adv_eps, scale=cfg.adv_scale, ddof=cfg.adv_ddof)[0]
