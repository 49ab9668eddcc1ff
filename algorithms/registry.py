"""Names -> algorithms: `register`, `make`, `available` (DESIGN §3).

A registry entry is a zero-argument function returning an `AlgorithmConfig`
preset; variants are presets built with `dataclasses.replace` from their base, so
an entry states exactly which options it changes (see `algorithms.presets`).
`make(name, **overrides)` applies overrides on top of the preset, validates the
result (`configure`, which needs no torch: run configs are checked with it) and builds
the `Algorithm`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from algorithms.config import AlgorithmConfig

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
    """The validated config of algorithm `name`, any AlgorithmConfig field overridden by
    keyword: what `make` builds its `Algorithm` from."""
    base = preset(name)
    valid = [field.name for field in dataclasses.fields(AlgorithmConfig)]
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for algorithm {name!r}; valid options: {valid}"
        )
    config = dataclasses.replace(base, **overrides).validate()
    from algorithms.exchange import available_strategies  # importing registers the built-ins

    config.require_one_of("exchange", available_strategies())
    return config


def make(name: str, **overrides: object) -> Algorithm:
    """Build algorithm `name`, with any AlgorithmConfig field overridden by keyword."""
    from algorithms.algorithm import Algorithm  # torch: only once an algorithm is built

    return Algorithm(name, configure(name, **overrides))
