"""The pre-registration check (docs/study/GAP-CONTROLS-PREREGISTRATION.md, section 5): the
last commit that touched any design file (`DESIGN_FILES`: the pre-registration, the grids, the
control strategies, the analysis code) must be earlier than every cell's start time
(`provenance.started_at` in its result.json)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.study.controls.design import DESIGN_FILES


def design_commit(repo: Path, files: Sequence[str] = DESIGN_FILES) -> dict[str, str] | None:
    """The last commit touching `files` in `repo` (hash and committer time, ISO 8601), or None
    where `repo` is not a git checkout or no commit touched them."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "log", "-1", "--format=%H %cI", "--", *files],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": out[0], "committed_at": out[1]} if out else None


def cell_starts(results: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each cell's recorded start time (`provenance.started_at`)."""
    return {r["cell"]: r["provenance"]["started_at"] for r in results}


def registration_check(commit: Mapping[str, str] | None, starts: Mapping[str, str]) -> dict:
    """Whether the design's commit precedes every cell's start: "pre-registered" (it does),
    "violated" (the cells that started at or before it are listed), "no cells" or "unknown"
    (no commit found)."""
    entry: dict[str, Any] = {"design_commit": commit, "cells": len(starts), "started_earlier": []}
    if starts:
        first = min(starts, key=lambda c: datetime.fromisoformat(starts[c]))
        entry |= {"first_cell": first, "first_cell_started_at": starts[first]}
    if commit is None:
        return entry | {"verdict": "unknown"}
    if not starts:
        return entry | {"verdict": "no cells"}
    committed = datetime.fromisoformat(commit["committed_at"])
    earlier = sorted(c for c, t in starts.items() if datetime.fromisoformat(t) <= committed)
    return entry | {
        "started_earlier": earlier,
        "verdict": "violated" if earlier else "pre-registered",
    }
