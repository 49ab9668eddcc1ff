"""Strategies from anywhere: the package's own modules, `module:Name` references and the
`graft.strategies` entry-point group.

A strategy module registers itself when imported (`register_strategy`, and usually an
`algorithms.register` entry), so making a strategy available is importing its module:
- in this package: every module is imported with the package (`import_package_modules`);
- anywhere on `sys.path`: `algorithm: "my_pkg.my_module:MyStrategy"` in a run config, a
  grid or `--set` imports `my_pkg.my_module` first (Gymnasium's `module:Name` form,
  resolved by `algorithms.registry.preset`);
- an installed package: an entry point in the group `graft.strategies`, named after the
  strategy it registers, e.g. in its pyproject.toml
  `[project.entry-points."graft.strategies"] topk = "my_pkg.topk:TopK"` (TopK registered as
  "topk"), is loaded with this package (`load_entry_points`), so its names are in
  `algorithms.available()` and `graft config show`.

An entry point that fails to load, or does not itself register a strategy of its name (a
strategy of that name registered by anything else does not count), is skipped with a
one-line warning naming it and its distribution, and the same line is the error when its
name is used (`failed_entry_point`, read by `algorithms.registry.preset`): one broken
installed plugin must not stop `import algorithms` (and every other algorithm, `graft eval`,
`graft config show`), but it is never silently absent either.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import warnings
from collections.abc import Iterable, Mapping

ENTRY_POINT_GROUP = "graft.strategies"
_FAILED: dict[str, str] = {}


def import_package_modules(package: str, path: Iterable[str]) -> None:
    """Import every module of `package` (its `__path__`), in name order."""
    for module in sorted(info.name for info in pkgutil.iter_modules(list(path))):
        importlib.import_module(f"{package}.{module}")


def load_entry_points() -> list[str]:
    """Load every entry point of the `graft.strategies` group (importing its module registers
    what it defines); return the names that loaded. A broken one is warned about and skipped
    (module docstring), its one-line problem kept for `failed_entry_point`."""
    loaded = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        problem = _load_problem(entry)
        if problem is None:
            loaded.append(entry.name)
            continue
        where = getattr(entry.dist, "name", None) or "an unknown distribution"
        _FAILED[entry.name] = (
            f"entry point {entry.name!r} = {entry.value!r} of group {ENTRY_POINT_GROUP!r} "
            f"(distribution {where}) {problem}"
        )
        warnings.warn(f"{_FAILED[entry.name]}; skipped", RuntimeWarning, stacklevel=2)
    return loaded


def failed_entry_point(name: str) -> str | None:
    """The one-line problem of the entry point `name` if it was skipped, else None."""
    return _FAILED.get(name)


def _load_problem(entry: importlib.metadata.EntryPoint) -> str | None:
    """Why `entry` is not usable: it fails to load, or what it registers (`_registered_by`)
    has no strategy of its name."""
    from algorithms.exchange.base import strategy_classes

    before = strategy_classes()
    try:
        entry.load()
    except Exception as error:
        first = (str(error).strip().splitlines() or [""])[0]
        return f"failed to load: {type(error).__name__}: {first}"
    registered = _registered_by(entry, before, strategy_classes())
    if entry.name in registered:
        return None
    names = ", ".join(repr(name) for name in registered)
    what = f" (it registers strategy {names})" if registered else " (it registers no strategy)"
    return (
        f"registers no strategy named {entry.name!r}{what}; name the entry point after the "
        "strategy it registers"
    )


def _registered_by(
    entry: importlib.metadata.EntryPoint, before: Mapping[str, type], after: Mapping[str, type]
) -> list[str]:
    """The strategies `entry` registered: those its loading added, and those defined in its
    module or below it (registered when the module was first imported, e.g. by an earlier
    entry point of the same module)."""
    module = entry.module
    return [
        name
        for name, cls in after.items()
        if name not in before or cls.__module__ == module or cls.__module__.startswith(f"{module}.")
    ]
