"""SGT baseline (Mutual RL, arXiv 2605.07244; GRAFT-SPEC §7 `sgt`).

GRPO plus an auxiliary NLL on one correct peer response: whenever the receiver
failed a prompt n/n (k_R = 0) and a peer solved it at least once, one of the peer's
correct responses is chosen uniformly (`sgt_pairs`) and the receiver trains on it
with `sgt_coef` x token NLL. Both directions, no balancing, and the receiver keeps
its own group. With more than two agents every peer contributes its own pick
[project extension]. The transferred response carries weight 1 and advantage 0:
it enters only the NLL term (peer_objective='nll'), never the policy gradient.

Each pick trains in the minibatch of its prompt, and the prompts are chunked and
ordered exactly as in GRPO (`Algorithm.build_batches`), so every minibatch's loss
is its GRPO token-mean plus `sgt_coef` x the mean NLL of the picks it holds: the
per-minibatch form of Mutual RL's GRPO + 0.1 NLL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from algorithms.core import sgt_pairs
from algorithms.exchange.base import (
    ExchangeResult,
    ExchangeStrategy,
    register_strategy,
    score_texts,
)
from algorithms.exchange.stats import ExchangeStats
from graft_env.schema import NonNegative
from graft_env.types import AgentRollouts, Scorer, TransferredGroup


@dataclass(frozen=True)
class SgtOptions:
    """SGT's option (merged into AlgorithmConfig); `Algorithm`'s loss reads it whenever
    peer_objective='nll', with any strategy (`algorithms.config.OBJECTIVE_OPTIONS`)."""

    sgt_coef: NonNegative = field(
        default=0.1,
        metadata={
            "help": "Coefficient of the SGT auxiliary NLL term (any peer_objective='nll' run)."
        },
    )


@register_strategy("sgt")
class SgtExchange(ExchangeStrategy):
    """One random correct peer response per receiver all-fail prompt, for an NLL term."""

    options = SgtOptions
    peer_objectives = ("nll",)  # SGT trains on peers only through the NLL

    @property
    def replaces_own_groups(self) -> bool:
        return False

    def select(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        scorer: Scorer,
        rng: np.random.Generator,
    ) -> ExchangeResult:
        stats = ExchangeStats(strategy=self.name)
        transfers: dict[str, list[TransferredGroup]] = {}
        for receiver in receivers:
            k_receiver = rollouts[receiver].k
            picks = []
            for source, peer in rollouts.items():
                if source == receiver:
                    continue
                pairs = sgt_pairs(k_receiver, peer.rewards, rng)
                direction = stats.direction(source, receiver)
                direction.candidates = len(pairs)
                direction.selected_prompts = [p for p, _ in pairs]
                picks += [(peer, p, i) for p, i in pairs]
            texts = [peer.texts[p][i] for peer, p, i in picks]
            reasons = [peer.finish_reasons[p][i] for peer, p, i in picks]
            scored = score_texts(scorer, receiver, [p for _, p, _ in picks], texts, reasons)
            groups = []
            for (peer, p, i), text, item in zip(picks, texts, scored, strict=True):
                groups.append(
                    TransferredGroup(
                        prompt_index=p,
                        source=peer.agent,
                        response_indices=np.array([i]),
                        texts=[text],
                        advantages=np.zeros(1),
                        weights=np.ones(1),
                        scored=[item],
                        clip=False,
                    )
                )
                stats.direction(peer.agent, receiver).record(None, np.ones(1), 0)
            transfers[receiver] = groups
        return ExchangeResult(transfers, stats)
