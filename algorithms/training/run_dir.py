"""Run directories: the marker that makes one recognisable, what `--fresh` may delete, and
where a run that must restart keeps what its earlier attempt wrote.

A directory is a run directory when it holds `MARKER`, written when a run creates the
directory (or finds it empty). `graft train --fresh` deletes nothing else: a directory of
notes named as `run_dir` by mistake survives. Nothing a run wrote is deleted on a restart
either: when no checkpoint is usable, the earlier files move to ``earlier-<UTC time>/``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from algorithms.training.checkpoint import has_checkpoints
from algorithms.training.run_config import ConfigError

MARKER = "graft-run.json"
EARLIER = "earlier-"


def create_run_dir(run_dir: Path) -> None:
    """Make `run_dir` and mark it as a run directory if it is new or empty (a directory
    that already held other files stays unmarked, so `--fresh` will not delete them)."""
    held_files = run_dir.is_dir() and any(run_dir.iterdir())
    run_dir.mkdir(parents=True, exist_ok=True)
    if not held_files:
        note = {"created": _utc_now(), "by": "graft train; `graft train --fresh` may delete it"}
        (run_dir / MARKER).write_text(json.dumps(note, indent=2) + "\n")


def check_fresh(run_dir: Path) -> None:
    """Refuse (`ConfigError`) to let `--fresh` delete `run_dir` unless it is a run
    directory, empty, or absent."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        why = "it is not a directory"
    elif (run_dir / MARKER).is_file() or not any(run_dir.iterdir()):
        return
    else:
        why = (
            f"it has no {MARKER}, so no graft run created it (runs before this marker existed "
            "have none either); delete it yourself or choose another run_dir"
        )
    raise ConfigError(f"--fresh will not delete {run_dir}: {why}")


def remove_fresh(run_dir: Path) -> None:
    """Delete `run_dir` for `--fresh`, once `check_fresh` allows it."""
    check_fresh(run_dir)
    if run_dir.is_dir():
        shutil.rmtree(run_dir)


def holds_steps(run_dir: Path) -> bool:
    """Whether an earlier attempt recorded any step here: a checkpoint, a metrics row or
    stored trajectories (one that stopped before its first step recorded none)."""
    metrics = run_dir / "metrics.jsonl"
    return (
        (metrics.is_file() and metrics.stat().st_size > 0)
        or has_checkpoints(run_dir / "checkpoints")
        or any((run_dir / "trajectories").glob("step_*"))
    )


def set_aside(run_dir: Path) -> Path:
    """Move everything in `run_dir` but the marker and earlier set-aside folders (its
    config.yaml too: the settings of the files set aside) into a new
    ``earlier-<UTC time>/`` folder; returns that folder."""
    stamp = f"{EARLIER}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    folder, again = run_dir / stamp, 1
    while folder.exists():  # two restarts within one second
        again += 1
        folder = run_dir / f"{stamp}-{again}"
    folder.mkdir()
    for path in sorted(run_dir.iterdir()):
        if path.name != MARKER and not path.name.startswith(EARLIER):  # nor `folder`
            os.replace(path, folder / path.name)
    return folder


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
