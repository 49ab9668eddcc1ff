"""Names -> algorithms: `register`, `make`, `available` (DESIGN §3).

A registry entry is a zero-argument function returning an `AlgorithmConfig`
preset; variants are presets built with `dataclasses.replace` from their base, so
an entry states exactly which options it changes (see `algorithms.presets`).
`make(name, **overrides)` applies overrides on top of the preset, validates the
result (`configure`, which needs no torch: run configs are checked with it) and builds
the `Algorithm`. The options are AlgorithmConfig's and every registered strategy's, merged
(`algorithms.config.merged_class`); a strategy's own options keep their defaults unless
`exchange` names it (`ExchangeStrategy.check_options`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import algorithms.exchange  # noqa: F401  (importing registers the built-in strategies)
from algorithms.config import AlgorithmConfig, option_fields

if TYPE_CHECKING:
    from algorithms.algorithm import Algorithm

Preset = Callable[[], AlgorithmConfig]
_PRESETS: dict[str, Preset] = {}


def register(name: str) -> Callable[[Preset], Preset]:
    """Decorator: register a zero-argument function returning the preset config of `name`."""

    def add(preset: Preset) -> Preset:
        if name in _PRESETS:
            raise ValueError(f"algorithm {name!r} is already registered")
        _PRESETS[name] = preset
        return preset

    return add


def available() -> list[str]:
    """Names of all registered algorithms, sorted."""
    return sorted(_PRESETS)


def preset(name: str) -> AlgorithmConfig:
    """The config registered under `name`, before overrides."""
    if name not in _PRESETS:
        raise ValueError(f"unknown algorithm {name!r}; available: {available()}")
    config = _PRESETS[name]()
    if not isinstance(config, AlgorithmConfig):
        raise TypeError(f"preset {name!r} returned {type(config).__name__}, not AlgorithmConfig")
    return config


def configure(name: str, **overrides: object) -> AlgorithmConfig:
    """The validated config of algorithm `name`, any option (AlgorithmConfig's or a
    strategy's, `option_fields`) overridden by keyword: what `make` builds its `Algorithm`
    from. Values are kept as given (an int for a float option stays an int)."""
    base = preset(name)
    valid = [field.name for field in option_fields()]
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for algorithm {name!r}; valid options: {valid}"
        )
    return dataclasses.replace(base, **overrides).validate()


def make(name: str, **overrides: object) -> Algorithm:
    """Build algorithm `name`, with any AlgorithmConfig field overridden by keyword."""
    from algorithms.algorithm import Algorithm  # torch: only once an algorithm is built

    return Algorithm(name, configure(name, **overrides))
