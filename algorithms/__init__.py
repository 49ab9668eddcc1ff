"""Learning rules for GRAFT: the registry, configs, exchange strategies and losses.

    import algorithms
    algo = algorithms.make("graft")            # or "grpo", "graft-no-compat", "hacpo", ...
    algorithms.available()                     # every registered name
    algorithms.make("grpo", n=16)              # any AlgorithmConfig field as an override

New entries: `@algorithms.register("name")` over a function returning an
`AlgorithmConfig`. New exchange strategies: `algorithms.exchange.register_strategy`.
"""

from algorithms import presets
from algorithms.algorithm import Algorithm
from algorithms.config import AlgorithmConfig
from algorithms.registry import available, make, preset, register

__all__ = ["Algorithm", "AlgorithmConfig", "available", "make", "preset", "presets", "register"]
