"""Size and SHA-256 records of files, checked when the files are read back.

Checkpoints (`algorithms.training.checkpoint`) and the trajectory store
(`algorithms.storage.store`) keep a manifest of such records beside what they write:
``{name: {"size": ..., "sha256": ...}}``. A file whose size or digest no longer matches
its record was damaged after it was written (a flipped bit, a truncated copy) and must not
be trusted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def sha256(path: Path) -> str:
    """The file's SHA-256, read in 1 MiB blocks (checkpoint weights can be large)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_record(path: Path) -> dict[str, Any]:
    """The record a manifest keeps for `path`."""
    return {"size": path.stat().st_size, "sha256": sha256(path)}


def mismatch(path: Path, record: Mapping[str, Any]) -> str | None:
    """None if `path` matches its manifest record, else how it differs."""
    size = path.stat().st_size
    if size != record["size"]:
        return f"has {size} bytes, the manifest says {record['size']}"
    if sha256(path) != record["sha256"]:
        return "does not match its SHA-256 in the manifest"
    return None
