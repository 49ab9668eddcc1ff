"""Run directories: whether one can be used, the marker that makes one recognisable, what
`--fresh` may delete, where `--restart` keeps what an earlier attempt wrote, and the records
a run keeps there besides its metrics: `run.log` and its TensorBoard hparams.

`check_writable` refuses, before any model loads, a `run_dir` that is a file, lies under one
or cannot be written, each in one line naming the key. A directory is a run directory when
it holds `MARKER`, written when a run creates the directory (or finds it empty).
`graft train --fresh` deletes nothing else: a directory of notes named as `run_dir` by
mistake survives. `--restart` deletes nothing: the earlier files move to
``earlier-<UTC time>/``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from algorithms.training.checkpoint import has_checkpoints
from algorithms.training.run_config import ConfigError

MARKER = "graft-run.json"
EARLIER = "earlier-"
RUN_LOG = "run.log"
RESOLVED_CONFIG = "resolved_config.yaml"


def check_writable(run_dir: Path) -> None:
    """Refuse (`ConfigError` naming `run_dir`) a run directory that is a file, lies inside a
    file, or whose nearest existing folder cannot be written (a file is made there and
    removed: permissions alone do not say, for root or on a read-only mount)."""
    path = run_dir.absolute()
    existing = next(folder for folder in (path, *path.parents) if folder.exists())
    if not existing.is_dir():
        inside = "" if existing == path else f" (run_dir {run_dir} would be inside it)"
        raise ConfigError(
            f"run_dir: {existing} is a file, not a directory{inside}; choose another run_dir"
        )
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise ConfigError(
            f"run_dir: cannot write in {existing} ({error.strerror or error}); choose another "
            "run_dir or make it writable"
        ) from None


def create_run_dir(run_dir: Path) -> None:
    """Make `run_dir` and mark it as a run directory if it is new or empty (a directory
    that already held other files stays unmarked, so `--fresh` will not delete them)."""
    held_files = run_dir.is_dir() and any(run_dir.iterdir())
    run_dir.mkdir(parents=True, exist_ok=True)
    if not held_files:
        note = {"created": _utc_now(), "by": "graft train; `graft train --fresh` may delete it"}
        (run_dir / MARKER).write_text(json.dumps(note, indent=2) + "\n")


def check_fresh(run_dir: Path, flag: str = "--fresh", action: str = "delete") -> None:
    """Refuse (`ConfigError`) to let `--fresh` delete `run_dir` (or `--restart` move its
    files aside) unless it is a run directory, empty, or absent."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        why = "it is not a directory"
    elif (run_dir / MARKER).is_file() or not any(run_dir.iterdir()):
        return
    else:
        why = (
            f"it has no {MARKER}, so no graft run created it (runs before this marker existed "
            "have none either); clear it yourself or choose another run_dir"
        )
    raise ConfigError(f"run_dir: {flag} will not {action} {run_dir}: {why}")


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
    ``earlier-<UTC time>/`` folder (only in a run directory: `check_fresh`); returns it."""
    check_fresh(run_dir, "--restart", "move the files of")
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


def holds_files(run_dir: Path) -> bool:
    """Whether `run_dir` holds anything but its marker and earlier set-aside folders."""
    return run_dir.is_dir() and any(
        path.name != MARKER and not path.name.startswith(EARLIER) for path in run_dir.iterdir()
    )


class _LogFile(logging.FileHandler):
    """run.log's handler: a record it cannot write (a full disk) is left out of the file
    without logging's traceback on stderr; the terminal has shown it, and the run's own
    writes (metrics, checkpoints) report the disk in one line."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


class RunLog:
    """`run.log` in a run directory: every log record the run emits (what the terminal shows
    of them, at the levels logging is configured for; Python warnings too, routed through
    logging while the log is open) and the lines only the log keeps (`note`: each step's
    summary, why a run stopped, the end-of-run summary). Appended to, so a resumed run's
    log follows its earlier attempts'. One is open at a time in a process: opening one
    closes the one before (a run driven step by step may never close its own)."""

    _current: RunLog | None = None

    def __init__(self, run_dir: Path) -> None:
        if RunLog._current is not None:
            RunLog._current.close()
        RunLog._current = self
        self._handler = _LogFile(run_dir / RUN_LOG, encoding="utf-8")
        self._handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )
        self._notes = logging.getLogger("graft.run_log")  # the log's own lines: not on screen
        self._notes.propagate = False
        self._notes.setLevel(logging.INFO)
        for logger in (logging.getLogger(), self._notes):
            logger.addHandler(self._handler)
        self._captured = getattr(warnings.showwarning, "__module__", None) == "logging"
        logging.captureWarnings(True)

    def note(self, text: str) -> None:
        """Write `text` to the log only."""
        self._notes.info("%s", text)

    def close(self) -> None:
        """Detach the log (warnings go back to stderr unless they went to logging before)."""
        if RunLog._current is not self:
            return  # closed already
        RunLog._current = None
        if not self._captured:
            logging.captureWarnings(False)
        for logger in (logging.getLogger(), self._notes):
            logger.removeHandler(self._handler)
        self._handler.close()


def append_note(run_dir: Path, text: str) -> None:
    """Append `text` to `run_dir`'s run.log once its run has closed it (the end-of-run
    summary that `graft train` prints)."""
    log = RunLog(run_dir)
    try:
        log.note(text)
    finally:
        log.close()


# the scalar tags TensorBoard's HParams tab shows beside each run's settings
HPARAM_METRICS = ("reward_mean", "eval/average/pass@1")


def write_hparams(run_dir: Path, resolved: Mapping[str, Any], agents: Sequence[str]) -> None:
    """The resolved config as TensorBoard hparams (`resolved_config`'s dotted keys), in each
    agent's TensorBoard folder beside that agent's scalars (TensorBoard reads the event files
    of a folder as one run): nulls and empty lists and mappings become their JSON text, as
    hparams take only text, numbers and booleans."""
    try:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams
    except ImportError:  # no tensorboard: the metrics log has said so
        return
    from algorithms.training.run_config import flat

    values = {
        key: value if isinstance(value, bool | int | float | str) else json.dumps(value)
        for key, value in flat(resolved).items()
    }
    from algorithms.training.tensorboard_sink import TB_DIR

    for agent in agents:
        writer = SummaryWriter(str(run_dir / TB_DIR / agent))
        try:
            for summary in hparams(values, dict.fromkeys(HPARAM_METRICS, 0.0)):
                writer.file_writer.add_summary(summary)
        finally:
            writer.close()


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
