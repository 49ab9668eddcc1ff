"""Learning rules for GRAFT: the registry, configs, exchange strategies and losses.

    import algorithms
    algo = algorithms.make("graft")            # or "grpo", "graft-no-compat", "hacpo", ...
    algorithms.available()                     # every registered name
    algorithms.make("grpo", n=16)              # any AlgorithmConfig field as an override
    algorithms.configure("grpo", n=16)         # its validated AlgorithmConfig (no torch)

New entries: `@algorithms.register("name")` over a function returning an
`AlgorithmConfig`. New exchange strategies: `algorithms.exchange.register_strategy` in a
module of `algorithms/exchange/` (imported with the package), in a module named as
`algorithms.make("my_module:MyStrategy")`, or behind a `graft.strategies` entry point.

Names load on first use (PEP 562), so `graft --help` and config validation do not wait
for torch: importing a submodule such as `algorithms.training.run_config` runs no torch import.

Modules:

algorithm         one learning rule as the loop sees it: advantages, exchange, batches, loss
collate           right-padded tensors from `TrainSequence`s, for the surrogate loss
config            `AlgorithmConfig`: the one config every registry entry is a preset of
core/             the pure core: advantages, gate, balancing, weights, losses, ordering
exchange/         pluggable exchange strategies (GRAFT, SGT, HACPO, none)
library/          trajectory libraries: peer groups from anywhere, keyed by prompt
presets           every registry entry: a base config and the options each variant changes
registry          names -> algorithms: `register`, `configure`, `make`, `available`
rollouts          policy generations + verdicts -> `AgentRollouts`, and the per-step seeds
storage/          what runs write and read back: the trajectory store, digests, YAML schemas
testing           what a strategy's tests need: hand-made rollouts, a scorer, gate-biased counts
training/         the common multi-agent training loop and everything a run needs
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Algorithm": "algorithms.algorithm",
    "AlgorithmConfig": "algorithms.config",
    "available": "algorithms.registry",
    "configure": "algorithms.registry",
    "make": "algorithms.registry",
    "preset": "algorithms.registry",
    "register": "algorithms.registry",
}

__all__ = [*_EXPORTS, "presets"]


def __getattr__(name: str) -> Any:
    if name.startswith("__"):  # probes such as __wrapped__ load nothing
        raise AttributeError(f"module 'algorithms' has no attribute {name!r}")
    importlib.import_module("algorithms.presets")  # registers every entry
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:  # a submodule (`algorithms.exchange`, ...), as an eager package would have loaded it
        try:
            value = importlib.import_module(f"algorithms.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"algorithms.{name}":
                raise
            raise AttributeError(f"module 'algorithms' has no attribute {name!r}") from None
    globals()[name] = value
    return value
