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

An entry point that fails to load, or registers no strategy of its name, is skipped with a
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
from collections.abc import Iterable

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
    """Why `entry` is not usable: it fails to load, or registers no strategy by its name."""
    from algorithms.config import strategy_names

    try:
        loaded = entry.load()
    except Exception as error:
        first = (str(error).strip().splitlines() or [""])[0]
        return f"failed to load: {type(error).__name__}: {first}"
    if entry.name in strategy_names():
        return None
    strategy = vars(loaded).get("name") if isinstance(loaded, type) else None
    loads = f" (it loads strategy {strategy!r})" if strategy else ""
    return (
        f"registers no strategy named {entry.name!r}{loads}; name the entry point after the "
        "strategy it registers"
    )
