"""The "none" strategy: nothing moves, so every agent trains on its own groups (GRPO)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from algorithms.exchange.base import ExchangeStrategy, check_exchange_inputs, register_strategy
from algorithms.exchange.stats import ExchangeStats
from algorithms.types import AgentRollouts, Scorer, TransferredGroup


@register_strategy("none")
class NoExchange(ExchangeStrategy):
    """GRPO and its variants: independent learners that share nothing."""

    def __call__(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        scorer: Scorer,
        rng: np.random.Generator,
    ) -> dict[str, list[TransferredGroup]]:
        check_exchange_inputs(rollouts, receivers, self.config.n)
        self.last_stats = ExchangeStats(strategy=self.name)
        return {receiver: [] for receiver in receivers}
