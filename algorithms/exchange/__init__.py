"""Pluggable exchange strategies: what each receiver gets from its peers in one step.

`register_strategy(name)` adds one, `available_strategies()` lists them and
`make_strategy(config)` builds the one `config.exchange` names. The protocol is in
`algorithms.exchange.base`; CONTRIBUTING.md walks through adding a strategy.
Built in: "none" (GRPO), "graft" (the gate and its ablations), "sgt", "hacpo".

Modules:

base              the strategy protocol (`ExchangeStrategy`) and its registry
controls          the gap study's peer controls: shuffled-reward peer, twin peer (issue 39)
graft             GRAFT's strategy: gate, balancing, whole-group transfer, weights
hacpo             HACPO: every agent learns from every peer's rollouts on every prompt
none              "none": nothing moves (GRPO)
resample          the loop's scorer that can also draw more groups from an agent (twin peer)
sgt               SGT (Mutual RL): successful peer responses into failed groups
stats             what an exchange did, per direction, for the logs
"""

from algorithms.exchange import controls, graft, hacpo, none, sgt
from algorithms.exchange.base import (
    ExchangeResult,
    ExchangeStrategy,
    available_strategies,
    filled_advantages,
    make_strategy,
    register_strategy,
    score_texts,
)
from algorithms.exchange.stats import DirectionStats, ExchangeStats

__all__ = [
    "DirectionStats",
    "ExchangeResult",
    "ExchangeStats",
    "ExchangeStrategy",
    "available_strategies",
    "controls",
    "filled_advantages",
    "graft",
    "hacpo",
    "make_strategy",
    "none",
    "register_strategy",
    "score_texts",
    "sgt",
]
