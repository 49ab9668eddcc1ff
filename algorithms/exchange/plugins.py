"""Strategies from anywhere: the package's own modules, `module:Name` references and the
`graft.strategies` entry-point group.

A strategy module registers itself when imported (`register_strategy`, and usually an
`algorithms.register` entry), so making a strategy available is importing its module:
- in this package: every module is imported with the package (`import_package_modules`);
- anywhere on `sys.path`: `algorithm: "my_pkg.my_module:MyStrategy"` in a run config, a
  grid or `--set` imports `my_pkg.my_module` first (Gymnasium's `module:Name` form,
  resolved by `algorithms.registry.preset`);
- an installed package: an entry point in the group `graft.strategies`, e.g. in its
  pyproject.toml `[project.entry-points."graft.strategies"] topk = "my_pkg.topk:TopK"`, is
  loaded with this package (`load_entry_points`), so its names are in
  `algorithms.available()` and `graft config show`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
from collections.abc import Iterable

ENTRY_POINT_GROUP = "graft.strategies"


def import_package_modules(package: str, path: Iterable[str]) -> None:
    """Import every module of `package` (its `__path__`), in name order."""
    for module in sorted(info.name for info in pkgutil.iter_modules(list(path))):
        importlib.import_module(f"{package}.{module}")


def load_entry_points() -> list[str]:
    """Load every entry point of the `graft.strategies` group (importing its module registers
    what it defines); return their names. A broken one is one error naming it."""
    loaded = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            entry.load()
        except Exception as error:
            raise ImportError(
                f"entry point {entry.name!r} = {entry.value!r} of group {ENTRY_POINT_GROUP!r} "
                f"(distribution {getattr(entry.dist, 'name', '?')}) failed to load: "
                f"{type(error).__name__}: {error}"
            ) from error
        loaded.append(entry.name)
    return loaded
