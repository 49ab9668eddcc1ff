"""Names -> algorithms: `register`, `make`, `available` (DESIGN §3).

A registry entry is a zero-argument function returning an `AlgorithmConfig`
preset; variants are presets built with `dataclasses.replace` from their base, so
an entry states exactly which options it changes (see `algorithms.presets`).
`make(name, **overrides)` applies overrides on top of the preset, validates the
result (`configure`, which needs no torch: run configs are checked with it) and builds
the `Algorithm`. The options are AlgorithmConfig's and every registered strategy's, merged
(`algorithms.config.merged_class`); a strategy's own options keep their defaults unless
`exchange` names it or a strategy built on it (`ExchangeStrategy.check_options`).

A name may be a reference `module.path:Name` (Gymnasium's form): the module is imported
first (it registers what it defines), then Name is an algorithm registered from that module
(or a submodule of it), or a registered exchange strategy class defined there (its algorithm
is the entry of the strategy's name, else the shared defaults with `exchange` set to it); a
name defined elsewhere is an error, so `os:graft` never runs the built-in GRAFT. Strategies
of installed packages come in through the `graft.strategies` entry points
(`algorithms.exchange.plugins`).

The entries are registered by importing `algorithms.presets` (which imports the strategies,
and they may register entries here): `algorithms.make` / `algorithms.available` do.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from algorithms.config import AlgorithmConfig, option_fields, strategy_names
from graft_env.suggest import did_you_mean

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


def registered_from(name: str) -> str:
    """The module that registered algorithm `name` (its preset function's module)."""
    if name not in _PRESETS:
        raise ValueError(f"unknown algorithm {name!r}{did_you_mean(name, _PRESETS)}")
    return getattr(_PRESETS[name], "__module__", None) or "?"


def _within(module: str, package: str) -> bool:
    """Whether `module` is `package` or one of its submodules."""
    return module == package or module.startswith(f"{package}.")


def available() -> list[str]:
    """Names of all registered algorithms, sorted."""
    return sorted(_PRESETS)


def preset(name: str) -> AlgorithmConfig:
    """The config registered under `name` (or a `module:Name` reference), before overrides."""
    if name in _PRESETS:
        config = _PRESETS[name]()
    elif ":" in name:
        config = _referenced(name)
    else:
        from algorithms.exchange.plugins import failed_entry_point  # imported with the entries

        problem = failed_entry_point(name)
        if problem is not None:
            raise ValueError(f"algorithm {name!r}: {problem}")
        raise ValueError(
            f"unknown algorithm {name!r}{did_you_mean(name, _PRESETS)}; available: {available()}"
        )
    if not isinstance(config, AlgorithmConfig):
        raise TypeError(f"preset {name!r} returned {type(config).__name__}, not AlgorithmConfig")
    return config


def _referenced(reference: str) -> AlgorithmConfig:
    """The preset a `module:Name` reference names, its module imported first."""
    module_name, _, name = reference.partition(":")
    if not module_name or not name or ":" in name:
        raise ValueError(f"algorithm {reference!r}: a reference is 'module.path:Name'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ValueError(
            f"algorithm {reference!r}: cannot import {module_name!r} ({error}); is it on "
            "PYTHONPATH or installed?"
        ) from None
    found = getattr(module, name, None)
    strategy = vars(found).get("name") if isinstance(found, type) else None  # set on registering
    origin = registered_from(name) if name in _PRESETS else getattr(found, "__module__", None)
    if (name in _PRESETS or strategy in strategy_names()) and not _within(origin, module_name):
        raise ValueError(
            f"algorithm {reference!r}: {name!r} is defined by {origin!r}, not by {module_name!r}"
        )
    if name in _PRESETS:
        return _PRESETS[name]()
    if strategy in strategy_names():
        return _PRESETS[strategy]() if strategy in _PRESETS else AlgorithmConfig(exchange=strategy)
    known = [*_PRESETS, *(n for n, v in vars(module).items() if isinstance(v, type))]
    raise ValueError(
        f"algorithm {reference!r}: {module_name!r} defines no registered algorithm or "
        f"exchange strategy {name!r}{did_you_mean(name, known)}"
    )


def configure(name: str, **overrides: object) -> AlgorithmConfig:
    """The validated config of algorithm `name`, any option (AlgorithmConfig's or a
    strategy's, `option_fields`) overridden by keyword: what `make` builds its `Algorithm`
    from. Values are kept as given (an int for a float option stays an int)."""
    base = preset(name)
    valid = [field.name for field in option_fields()]
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        hint = did_you_mean(unknown[0], valid) if len(unknown) == 1 else ""
        raise ValueError(
            f"unknown option(s) {unknown} for algorithm {name!r}{hint}; valid options: {valid}"
        )
    return dataclasses.replace(base, **overrides).validate()


def make(name: str, **overrides: object) -> Algorithm:
    """Build algorithm `name`, with any AlgorithmConfig field overridden by keyword."""
    from algorithms.algorithm import Algorithm  # torch: only once an algorithm is built

    return Algorithm(name, configure(name, **overrides))
