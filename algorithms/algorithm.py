"""One learning rule as the loop sees it: advantages, exchange, batches, loss.

Every registry entry is this class with a different `AlgorithmConfig` and the
exchange strategy that config names. Each step the loop calls, in order:

1. `compute_advantages(rollouts)`: Eq.1 per agent and group.
2. `exchange(rollouts, receivers, scorer, rng)`: the strategy's transfers and
   statistics (`ExchangeResult`).
3. `build_batches(rollouts, transfers, receivers, rng)`: one `TrainBatch` per
   receiver with the minibatch order fixed, and what went into it (`BatchCounts`).
4. `loss(new_logp, sequences)` per minibatch: Eq.10 via one `clipped_surrogate`
   (plus SGT's NLL, and the KL term, with the reference log-probs the policy
   computes, when `needs_reference`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from itertools import accumulate

import numpy as np
import torch

from algorithms.collate import CollatedSequences, collate
from algorithms.config import AlgorithmConfig
from algorithms.core import (
    SurrogateOutput,
    agg_loss,
    clipped_surrogate,
    group_advantages,
    order_minibatches,
    reference_kl,
    token_nll,
)
from algorithms.exchange import ExchangeResult, make_strategy
from graft_env.types import (
    AgentRollouts,
    Scorer,
    TrainBatch,
    TrainSequence,
    TransferredGroup,
)

BatchCounts = dict[str, int]
"""What one receiver's batch holds and left out, in groups and responses: own_groups,
replaced_groups, dynamic_dropped_groups, peer_sequences, removed_peer_responses,
fully_removed_groups (logged as `batch/<key>`)."""


class Algorithm:
    """A named, validated config plus its exchange strategy."""

    def __init__(self, name: str, config: AlgorithmConfig) -> None:
        self.name = name
        self.config = config.validate()
        self.strategy = make_strategy(config)

    def __repr__(self) -> str:
        return f"Algorithm({self.name!r}, exchange={self.config.exchange!r})"

    def describe(self) -> dict[str, str]:
        """What this entry does beyond GRPO: each option it sets away from the defaults
        (GRPO as in the paper), as "value: help text"; empty for `grpo` itself."""
        defaults, helps = AlgorithmConfig(), self.config.describe()
        return {
            spec.name: f"{getattr(self.config, spec.name)!r}: {helps[spec.name]}"
            for spec in dataclasses.fields(self.config)
            if getattr(self.config, spec.name) != getattr(defaults, spec.name)
        }

    @property
    def needs_reference(self) -> bool:
        """Whether `loss` takes `ref_logp`, the initial policy's log-probs (kl_coef > 0).
        Policies read it to build a reference model, and only then."""
        return self.config.kl_coef > 0

    def compute_advantages(self, rollouts: Mapping[str, AgentRollouts]) -> None:
        """Fill each agent's `.advantages` with group-normalised rewards (Eq.1)."""
        cfg = self.config
        for agent, agent_rollouts in rollouts.items():
            if agent_rollouts.n != cfg.n:
                raise ValueError(
                    f"agent {agent!r} sampled groups of {agent_rollouts.n}, config n={cfg.n}"
                )
            agent_rollouts.advantages = group_advantages(
                agent_rollouts.rewards, eps=cfg.adv_eps, scale=cfg.adv_scale, ddof=cfg.adv_ddof
            )

    def exchange(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        scorer: Scorer,
        rng: np.random.Generator,
    ) -> ExchangeResult:
        """Run the exchange strategy: every receiver's (possibly empty) list of groups,
        and what the strategy did."""
        return self.strategy(rollouts, receivers, scorer, rng)

    def build_batches(
        self,
        rollouts: Mapping[str, AgentRollouts],
        transfers: Mapping[str, Sequence[TransferredGroup]],
        receivers: Sequence[str],
        rng: np.random.Generator,
    ) -> tuple[dict[str, TrainBatch], dict[str, BatchCounts]]:
        """Own groups plus retained transferred responses, in minibatch order, per receiver,
        and the counts of what each batch holds and left out.

        A prompt that received data drops the receiver's own group when the strategy
        replaces groups (GRAFT); pooled strategies keep both. Transferred responses with
        w = 0 are left out; dynamic sampling leaves out own groups with k in {0, n}.
        All are counted in the receiver's `BatchCounts`.

        Minibatch units are prompts: every row of one prompt (its own group, the
        transferred group that replaced it, the source half of a pooled 2n group, its
        SGT picks) is one unit, never split, so own groups are chunked exactly as in
        GRPO and transferred rows share a minibatch with their prompt. A unit is a
        peer unit, run last under peer_last (§4.2), when it holds a transferred row
        that enters the clipped surrogate: peer-last exists so that clipping can
        act on peer ratios, and SGT's NLL-only picks have no ratio, so SGT orders
        and chunks its prompts exactly as GRPO does. Strategies whose
        `units_by_prompt` is False (HACPO) make the own group and each transferred
        group separate units instead.

        With SGT each minibatch's loss is therefore its GRPO token-mean plus
        `sgt_coef` x the mean NLL of the picks in that minibatch: the per-minibatch
        analogue of Mutual RL's GRPO + 0.1 NLL.

        [project choice] A transferred group whose every response was removed (all
        s <= delta) still replaces the receiver's group (§3), and removed responses
        count nowhere (§4), so that prompt contributes nothing to the receiver's
        batch. Counted as `fully_removed_groups`.
        """
        missing = [r for r in receivers if r not in transfers]
        if missing:
            raise ValueError(f"transfers has no entry for receivers {missing}")
        batches, counts = {}, {}
        for r in receivers:
            batches[r], counts[r] = self._build_batch(r, rollouts, transfers[r], rng)
        return batches, counts

    def _build_batch(
        self,
        receiver: str,
        rollouts: Mapping[str, AgentRollouts],
        received: Sequence[TransferredGroup],
        rng: np.random.Generator,
    ) -> tuple[TrainBatch, BatchCounts]:
        cfg = self.config
        own = rollouts[receiver]
        own_advantages = self.strategy.own_advantages(receiver, rollouts, received)
        by_prompt: dict[int, list[TransferredGroup]] = defaultdict(list)
        for group in received:
            if not 0 <= group.prompt_index < len(own.prompts):
                raise ValueError(
                    f"transferred group from {group.source!r} names prompt {group.prompt_index}; "
                    f"receiver {receiver!r} has prompts 0..{len(own.prompts) - 1}"
                )
            by_prompt[group.prompt_index].append(group)
        counts = dict.fromkeys(
            (
                "own_groups",
                "replaced_groups",
                "dynamic_dropped_groups",
                "peer_sequences",
                "removed_peer_responses",
                "fully_removed_groups",
            ),
            0,
        )
        units: list[list[TrainSequence]] = []
        for p in range(len(own.prompts)):
            own_rows = []
            if p in by_prompt and self.strategy.replaces_own_groups:
                counts["replaced_groups"] += 1
            elif cfg.dynamic_sampling and own.k[p] in (0, cfg.n):
                counts["dynamic_dropped_groups"] += 1
            else:
                counts["own_groups"] += 1
                own_rows = [self._own_sequence(own, p, i, own_advantages) for i in range(cfg.n)]
            peer_groups = []
            for group in by_prompt.get(p, []):
                peers = self._peer_sequences(group)
                counts["peer_sequences"] += len(peers)
                counts["removed_peer_responses"] += len(group.weights) - len(peers)
                counts["fully_removed_groups"] += not peers
                peer_groups.append(peers)
            if self.strategy.units_by_prompt:
                units.append(own_rows + [seq for peers in peer_groups for seq in peers])
            else:
                units += [own_rows, *peer_groups]

        units = [unit for unit in units if unit]
        unit_is_peer = [any(s.is_peer and s.policy_gradient for s in unit) for unit in units]
        sequences = [seq for unit in units for seq in unit]
        starts = list(accumulate((len(unit) for unit in units), initial=0))
        order = order_minibatches(unit_is_peer, cfg.num_minibatches, cfg.order, rng=rng)
        minibatches = [
            [j for u in chunk for j in range(starts[u], starts[u + 1])] for chunk in order
        ]
        batch = TrainBatch(
            agent=receiver, prompts=list(own.prompts), sequences=sequences, minibatches=minibatches
        )
        return batch, counts

    def _own_sequence(
        self, own: AgentRollouts, p: int, i: int, advantages: np.ndarray
    ) -> TrainSequence:
        """Own response (p, i): its old log-probs are those recorded while sampling, or the
        trainer's rescoring where the rollout correction set them, with its weights."""
        rescored = own.train_logprobs[p][i] if own.train_logprobs is not None else None
        weights = own.rollout_weights[p][i] if own.rollout_weights is not None else None
        old = own.logprobs[p][i] if rescored is None else rescored
        return TrainSequence(
            prompt_index=p,
            response_token_ids=list(own.token_ids[p][i]),
            old_logprobs=np.asarray(old, dtype=np.float64),
            advantage=float(advantages[p, i]),
            source=own.agent,
            clip=self.config.clip_own,
            rollout_weights=None if weights is None else np.asarray(weights, dtype=np.float64),
        )

    def _peer_sequences(self, group: TransferredGroup) -> list[TrainSequence]:
        """The group's responses with w > 0, on the receiver's tokenisation."""
        sizes = {
            "response_indices": len(group.response_indices),
            "texts": len(group.texts),
            "advantages": len(group.advantages),
            "weights": len(group.weights),
            "scored": len(group.scored),
        }
        if len(set(sizes.values())) != 1:
            raise ValueError(
                f"transferred group (prompt {group.prompt_index}, source {group.source!r}) "
                f"has inconsistent lengths {sizes}"
            )
        nll_only = self.config.peer_objective == "nll"
        return [
            TrainSequence(
                prompt_index=group.prompt_index,
                response_token_ids=list(scored.token_ids),
                old_logprobs=np.asarray(scored.logprobs, dtype=np.float64),
                advantage=float(advantage),
                weight=float(weight),
                is_peer=True,
                source=group.source,
                clip=group.clip,
                policy_gradient=not nll_only,
                nll=nll_only,
            )
            for scored, advantage, weight in zip(
                group.scored, group.advantages, group.weights, strict=True
            )
            if weight > 0
        ]

    def loss(
        self,
        new_logp: torch.Tensor,
        sequences: Sequence[TrainSequence],
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Loss to minimise for one minibatch, and its statistics.

        new_logp [B, T]: the receiver's current log-probs of each sequence's response
        tokens, right-padded. Own and peer rows share Eq.10's denominator (token count,
        or the constant_norm budget per response); when the config gives peers their
        own clip range (HACPO), the peer rows carry it as their per-row clip bounds.

        ref_logp [B, T]: the same tokens under the frozen initial policy, given exactly
        when `needs_reference`; the loss then adds kl_coef x the k3 KL over the policy
        gradient's tokens, divided by the same denominator (verl's kl_loss).

        The statistics are token counts and per-minibatch means (loss, nll, kl), never
        shares: the policy averages each over the step's minibatches, so a share
        (`clipped_share_peer` in `metrics`) is a ratio of two pooled counts. A mean of
        per-minibatch fractions would weigh a minibatch of 10 peer tokens like one of
        1,000 and count own-only minibatches as 0.
        """
        cfg = self.config
        self._check_reference(ref_logp)
        batch = collate(sequences, new_logp)
        surrogate = self._surrogate(new_logp, batch)
        nll_mask = batch.mask * batch.nll[:, None].to(batch.mask.dtype)
        nll = token_nll(new_logp, nll_mask)
        loss = surrogate.loss + cfg.sgt_coef * nll if bool(batch.nll.any()) else surrogate.loss
        kl_stats = {}
        if ref_logp is not None:
            kl = self._reference_kl(new_logp, ref_logp, batch, surrogate.normaliser)
            loss = loss + cfg.kl_coef * kl
            kl_stats["kl"] = float(kl.detach())
        counts = ("pg_tokens", "own_tokens", "peer_tokens", "clipped_own", "clipped_peer")
        stats = {
            "loss": float(loss.detach()),
            **{name: float(getattr(surrogate, name)) for name in counts},
            "nll": float(nll.detach()),
            "nll_tokens": float(nll_mask.sum()),
            **kl_stats,
        }
        return loss, stats

    def _check_reference(self, ref_logp: torch.Tensor | None) -> None:
        """`loss` takes ref_logp exactly when the algorithm `needs_reference`."""
        if self.needs_reference != (ref_logp is not None):
            raise ValueError(
                f"algorithm {self.name!r}: kl_coef={self.config.kl_coef} needs ref_logp (the "
                "policy computes it when given this algorithm's `loss` itself)"
                if self.needs_reference
                else f"algorithm {self.name!r}: ref_logp given, but kl_coef is 0"
            )

    def _surrogate(self, new_logp: torch.Tensor, batch: CollatedSequences) -> SurrogateOutput:
        """Eq.10 over the batch, with the config's ratio form, LUFFY's peer term and the
        clip radii per row: peers take peer_eps_* where set (HACPO), else the own radii; own
        rows the rollout correction weighted carry their token weights."""
        cfg = self.config
        rows = len(batch.weights)
        seq_ratio = torch.full((rows,), cfg.ratio == "sequence", device=new_logp.device)

        def radius(own: float, peer: float | None) -> torch.Tensor:
            # float64, so 1 - eps is the same double a Python float bound would give
            own_rows = torch.full((rows,), own, dtype=torch.float64, device=new_logp.device)
            return own_rows if peer is None else torch.where(batch.is_peer, peer, own_rows)

        return clipped_surrogate(
            new_logp,
            batch.old_logp,
            batch.mask,
            batch.advantages,
            batch.weights,
            eps_low=radius(cfg.eps_low, cfg.peer_eps_low),
            eps_high=radius(cfg.eps_high, cfg.peer_eps_high),
            clip=batch.clip,
            seq_ratio=seq_ratio,
            is_peer=batch.is_peer,
            luffy=batch.is_peer & (cfg.peer_objective == "luffy"),
            luffy_gamma=cfg.luffy_gamma,
            constant_norm=cfg.constant_norm,
            token_weights=batch.token_weights,
        )

    @staticmethod
    def _reference_kl(
        new_logp: torch.Tensor,
        ref_logp: torch.Tensor,
        batch: CollatedSequences,
        normaliser: torch.Tensor,
    ) -> torch.Tensor:
        """The k3 KL to the reference over the policy gradient's tokens (rows with w > 0),
        aggregated like the policy loss, by its normaliser (verl's kl_loss)."""
        pg_mask = batch.mask.bool() & (batch.weights > 0)[:, None]
        return agg_loss(reference_kl(new_logp, ref_logp, pg_mask), pg_mask, normaliser)
