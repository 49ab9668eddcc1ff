"""Package attributes loaded on first use (PEP 562), so importing a package stays cheap.

`graft config validate` and `--help` must not import torch; packages whose submodules do
(the policies, the loss terms) export their names through `lazy_exports`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: `exports` maps each name to the module that
    defines it; the value is imported on first access and cached in the package."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
