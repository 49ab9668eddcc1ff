"""Dataset registry: one name per dataset, one `load` for all of them.

Modelled on reasoning-gym's `register_dataset`: a loader is a plain function
`loader(split, data_dir, **options) -> list[Problem]` registered under a name with
its splits. `load` checks the name, split and option names before calling it, so
every mistake in a config gets the same clear message listing what is valid and, when one
is close, the name that was meant ("did you mean"), and checks after it that ids are
unique, which the trajectory store relies on.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from graft_env.data.problem import DatasetError, Problem
from graft_env.suggest import did_you_mean

Loader = Callable[..., list[Problem]]


@dataclass(frozen=True)
class _Entry:
    loader: Loader
    splits: tuple[str, ...]
    default_split: str
    # Keyword options the loader accepts beyond split and data_dir; None: any (**options).
    options: tuple[str, ...] | None


_REGISTRY: dict[str, _Entry] = {}


def register_dataset(
    name: str, *, splits: Sequence[str], default_split: str
) -> Callable[[Loader], Loader]:
    """Decorator: register `loader(split, data_dir, **options)` under `name`.

    The loader's parameters after `split` and `data_dir` are its options; `load`
    rejects any other option name before calling it (unless the loader takes
    `**options`, which then checks them itself).
    """
    split_names = tuple(splits)
    if not split_names:
        raise ValueError(f"dataset {name!r}: splits must not be empty")
    if default_split not in split_names:
        raise ValueError(
            f"dataset {name!r}: default_split {default_split!r} is not one of {split_names}"
        )

    def decorator(loader: Loader) -> Loader:
        if name in _REGISTRY:
            raise ValueError(f"dataset {name!r} is already registered")
        parameters = list(inspect.signature(loader).parameters.values())
        if len(parameters) < 2:
            raise TypeError(
                f"dataset {name!r}: loader must take (split, data_dir, **options), "
                f"got {len(parameters)} parameter(s)"
            )
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
        options = None if takes_any else tuple(p.name for p in parameters[2:])
        _REGISTRY[name] = _Entry(loader, split_names, default_split, options)
        return loader

    return decorator


def available() -> list[str]:
    """Names of all registered datasets, sorted."""
    return sorted(_REGISTRY)


def dataset_options(name: str) -> tuple[str, ...] | None:
    """The keyword options dataset `name`'s loader takes (None: any); `name` must be
    registered."""
    return _REGISTRY[name].options


def load(
    name: str,
    split: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    **options: object,
) -> list[Problem]:
    """Load dataset `name` (split defaults to the dataset's own default).

    `data_dir` is passed to the loader, which resolves it with `resolve_data_dir`
    when it reads files (argument, else `$GRAFT_DATA_DIR`). Raises `DatasetError`
    for an unknown name, split or option, listing the valid ones.
    """
    entry = _REGISTRY.get(name)
    if entry is None:
        raise DatasetError(
            f"unknown dataset {name!r}; available datasets: {available()}"
            f"{did_you_mean(name, available())}"
        )
    chosen_split = entry.default_split if split is None else split
    if chosen_split not in entry.splits:
        raise DatasetError(
            f"dataset {name!r} has no split {chosen_split!r}; valid splits: {list(entry.splits)}"
            f"{did_you_mean(chosen_split, entry.splits)}"
        )
    unknown = [] if entry.options is None else sorted(set(options) - set(entry.options))
    if unknown:
        raise DatasetError(
            f"dataset {name!r} got unknown option(s) {unknown}; valid options: "
            f"{list(entry.options)}{did_you_mean(unknown[0], entry.options)}"
        )
    problems = entry.loader(chosen_split, data_dir, **options)
    _check_unique_ids(name, chosen_split, problems)
    return problems


def _check_unique_ids(name: str, split: str, problems: list[Problem]) -> None:
    seen: set[str] = set()
    for position, problem in enumerate(problems):
        if problem.id in seen:
            raise DatasetError(
                f"dataset {name!r} split {split!r}: duplicate id {problem.id!r} at item {position}"
            )
        seen.add(problem.id)
