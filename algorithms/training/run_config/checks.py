"""What types cannot say about a run config, checked before any model loads: the algorithm
and its options (a `module:Name` one imported first), a library's settings, policy options,
and the prompt stream loaded as the run will."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from algorithms.storage.yaml_schema import ConfigError
from algorithms.training.run_config.sections import (
    LibrarySpec,
    agent_option_classes,
    algorithm_options_class,
)
from graft_env.schema import OptionError, check_options, unknown_name
from graft_env.suggest import did_you_mean

if TYPE_CHECKING:
    from algorithms.config import AlgorithmConfig
    from algorithms.training.run_config.sections import EnvSection


def check_library_spec(library: LibrarySpec, names: Sequence[str], stored_peer: bool) -> None:
    from algorithms.library import LIBRARY_AGENT

    if stored_peer:
        raise ConfigError("library: set stored_peer (a run to replay) or library, not both")
    if (library.choose == "model") != (library.model is not None):
        raise ConfigError(
            f"library.model: {library.model!r} must be set exactly when library.choose is "
            f"'model' (choose is {library.choose!r})"
        )
    if LIBRARY_AGENT in names:
        raise ConfigError(f"agents: {LIBRARY_AGENT!r} is the library's name in a run; rename it")


def check_algorithm(name: str, options: Mapping[str, Any]) -> AlgorithmConfig:
    """The algorithm and its options as `algorithms.make` takes them (`algorithms.configure`:
    AlgorithmConfig.validate, no torch); a bad option is `algorithm_options.<key>: ...`."""
    import algorithms

    known = algorithms.available()
    if ":" not in name and name not in known:
        raise ConfigError(
            f"algorithm: unknown algorithm {name!r}{did_you_mean(name, known)}; "
            f"valid: {', '.join(known)}"
        )
    try:
        algorithms.preset(name)  # a `module:Name` reference imports its module here
    except ValueError as error:
        raise ConfigError(f"algorithm: {error}") from None
    where = "algorithm_options"
    try:
        check_options(algorithm_options_class(), options, where)
        return algorithms.configure(name, **options)
    except OptionError as error:
        raise error.at(where) from None


def check_policy_options(options: Mapping[str, Any], where: str) -> None:
    """An agent's `options` checked as `load_policy` would take them, before any model loads:
    known names, the types and checks of `HFPolicyOptions`, `LoaderOptions` and
    `VLLMEngineOptions` (`vllm_<field>`), and half-precision weights at a learning rate whose
    steps round away (`policies.precision`)."""
    from graft_env.policies.precision import HALF_PRECISION_DTYPES, half_precision_training_error

    classes = agent_option_classes()
    valid = [prefix + f.name for prefix, cls in classes for f in dataclasses.fields(cls)]
    for key in options:
        if key not in valid:
            raise ConfigError(f"{where}.{key}: {unknown_name('option', key, valid)}")
    built = {}
    for prefix, cls in classes:
        names = {prefix + f.name for f in dataclasses.fields(cls)}
        values = {k.removeprefix(prefix): v for k, v in options.items() if k in names}
        try:
            built[cls.__name__] = cls(**values)
        except OptionError as error:
            raise error.at(where, prefix) from None
    policy = built["HFPolicyOptions"]
    error = half_precision_training_error(policy.dtype, policy.lr)
    if policy.dtype in HALF_PRECISION_DTYPES and error:
        raise ConfigError(f"{where}: {error}")


def import_referenced(algorithm: object) -> None:
    """Import the module of a `module:Name` algorithm before the options are checked, so the
    options its strategy declares are known (`algorithms.registry.preset` imports it)."""
    if isinstance(algorithm, str) and ":" in algorithm:
        import algorithms

        try:
            algorithms.preset(algorithm)
        except ValueError as error:
            raise ConfigError(f"algorithm: {error}") from None


def check_env(env: EnvSection) -> None:
    """Load the prompt stream as the run will (split, option names and values, data files):
    the run loads it only after its models, minutes later with real ones. Not part of
    `_check`, which every config a grid builds goes through: loading takes a moment (0.3 s
    for the default procedural set)."""
    from graft_env.data import DatasetError, load
    from graft_env.data.registry import dataset_options

    valid = dataset_options(env.dataset)
    for name in env.dataset_options:
        if valid is not None and name not in valid:
            where = f"env.dataset_options.{name}"
            raise ConfigError(f"{where}: {unknown_name('option', name, valid)}")
    try:
        load(env.dataset, env.split, env.data_dir, **env.dataset_options)
    except DatasetError as error:
        where = "env" if error.option is None else f"env.dataset_options.{error.option}"
        raise ConfigError(f"{where}: {error}") from None
    except (ValueError, TypeError) as error:  # a loader's own type check
        raise ConfigError(f"env: {error}") from None
