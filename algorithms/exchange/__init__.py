"""Pluggable exchange strategies: what each receiver gets from its peers in one step.

`register_strategy(name)` adds one, `available_strategies()` lists them and
`make_strategy(config)` builds the one `config.exchange` names. The protocol is in
`algorithms.exchange.base`; CONTRIBUTING.md walks through adding a strategy.
Built in: "none" (GRPO), "graft" (the gate and its ablations), "sgt", "hacpo".

Importing this package imports every module in it (a strategy module registers itself:
a new one needs no edit here, and describes itself in its own docstring's first line) and
then the strategies that installed packages declare in the `graft.strategies` entry-point
group (`plugins`).

Modules:

base              the strategy protocol (`ExchangeStrategy`) and its registry
graft             GRAFT's strategy: gate, balancing, whole-group transfer, weights, hooks
graft_steps       GRAFT's steps as functions: the gate's plan, scoring peer groups, admission units
hacpo             HACPO: every agent learns from every peer's rollouts on every prompt
none              "none": nothing moves (GRPO)
peer_group        `PeerGroup`: one source group on its way to a receiver, as GRAFT's hooks see it
plugins           strategies from anywhere: `module:Name` and `graft.strategies` entry points
sgt               SGT (Mutual RL): successful peer responses into failed groups
stats             what an exchange did, per direction, for the logs
*                 any other module: a strategy that registers itself, as its docstring says
"""

from algorithms.exchange import graft, hacpo, none, sgt
from algorithms.exchange.base import (
    ExchangeResult,
    ExchangeStrategy,
    available_strategies,
    filled_advantages,
    make_strategy,
    register_strategy,
    score_texts,
)
from algorithms.exchange.peer_group import PeerGroup
from algorithms.exchange.plugins import import_package_modules, load_entry_points
from algorithms.exchange.stats import DirectionStats, ExchangeStats

__all__ = [
    "DirectionStats",
    "ExchangeResult",
    "ExchangeStats",
    "ExchangeStrategy",
    "PeerGroup",
    "available_strategies",
    "filled_advantages",
    "graft",
    "hacpo",
    "make_strategy",
    "none",
    "register_strategy",
    "score_texts",
    "sgt",
]

import_package_modules(__name__, __path__)
load_entry_points()
