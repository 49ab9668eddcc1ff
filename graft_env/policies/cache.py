"""Where built-in models are built and kept (the tiny pair, the testbed, converted real
models): a module of its own, free of torch, because `graft --help` and config checks
resolve model names without loading a model."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """`$GRAFT_CACHE_DIR`, else `~/.cache/graft`."""
    return Path(os.environ.get("GRAFT_CACHE_DIR") or Path.home() / ".cache" / "graft")
