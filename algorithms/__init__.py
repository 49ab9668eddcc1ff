"""Learning rules for GRAFT: the registry, configs, exchange strategies and losses.

    import algorithms
    algo = algorithms.make("graft")            # or "grpo", "graft-no-compat", "hacpo", ...
    algorithms.available()                     # every registered name
    algorithms.make("grpo", n=16)              # any AlgorithmConfig field as an override
    algorithms.configure("grpo", n=16)         # its validated AlgorithmConfig (no torch)

New entries: `@algorithms.register("name")` over a function returning an
`AlgorithmConfig`. New exchange strategies: `algorithms.exchange.register_strategy`.

Names load on first use (PEP 562), so `graft --help` and config validation do not wait
for torch: importing a submodule such as `algorithms.run_config` runs no torch import.
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
