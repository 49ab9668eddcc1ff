"""The "none" strategy: nothing moves, so every agent trains on its own groups (GRPO)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from algorithms.exchange.base import ExchangeResult, ExchangeStrategy, register_strategy
from algorithms.exchange.stats import ExchangeStats
from graft_env.types import AgentRollouts, Scorer


@register_strategy("none")
class NoExchange(ExchangeStrategy):
    """GRPO and its variants: independent learners that share nothing."""

    @property
    def moves_groups(self) -> bool:
        return False

    def select(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        scorer: Scorer,
        rng: np.random.Generator,
    ) -> ExchangeResult:
        nothing = {receiver: [] for receiver in receivers}
        return ExchangeResult(nothing, ExchangeStats(strategy=self.name))
