"""`graft compare`'s worker processes: the grid's `workers` processes, each claiming and
running cells (`run._work`), their output lines prefixed, stopped with their parent.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from multiprocessing.queues import SimpleQueue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from benchmarks.compare.cell_run import CellFailed, one_line
from benchmarks.compare.cells import Cell
from benchmarks.compare.claims import remove_locks_of
from benchmarks.compare.grid import GridError, GridSpec

PARENT_POLL_SECONDS = 1.0  # between a worker's looks at whether its parent is alive
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"

# the scheduler each worker runs (`run._work`): grid, cells, --out, console, stop() -> results
Work = Callable[[GridSpec, Sequence[Cell], Path, Console, Callable[[], bool]], Any]


class _Prefixed(io.TextIOBase):
    """A worker's stdout or stderr: every line starts with the worker's prefix and goes out
    whole, so the lines of workers sharing a terminal interleave but never mix. Not a
    terminal, so rich prints a training run's progress as lines rather than live bars."""

    def __init__(self, stream: TextIO, prefix: str) -> None:
        self._stream, self._prefix, self._partial = stream, prefix, ""

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        if lines:
            self._stream.write("".join(f"{self._prefix}{line}\n" for line in lines))
            self._stream.flush()
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._stream.fileno()


def _worker(
    number: int,
    work: Work,
    grid: GridSpec,
    cells: Sequence[Cell],
    out_dir: Path,
    stop: Event,
    failures: SimpleQueue[tuple[int, str]],
    log_level: int,
    parent: int,
) -> None:
    """One worker process of `run_grid`: `work` (`run._work`) with output lines prefixed
    [w<number>]."""
    _exit_with_parent(parent)  # the pid the parent gave: it may be gone before we get here
    prefix = f"[w{number}] "
    sys.stdout, sys.stderr = (_Prefixed(s, prefix) for s in (sys.stdout, sys.stderr))
    logging.basicConfig(level=log_level, format=LOG_FORMAT)
    console = Console(stderr=True, width=shutil.get_terminal_size().columns - len(prefix))
    try:
        work(grid, cells, out_dir, console, stop.is_set)
    except KeyboardInterrupt:  # Ctrl-C reached the parent too, which says so
        sys.exit(130)
    except CellFailed as error:  # its traceback is out already
        failures.put((number, str(error)))
        sys.exit(1)
    except Exception as error:
        traceback.print_exc()
        failures.put((number, f"worker {number}: {one_line(error)}"))
        sys.exit(1)


def _exit_with_parent(parent: int) -> None:
    """End this worker when `parent` is gone (killed without the chance to stop its workers,
    e.g. SIGKILL): an orphan would go on training cells nobody collects, beside the next
    run's workers. Its cell's lock then names a dead pid, which the next run takes over."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (a scheduler's or `kill`'s stop) as an exit, so `run_workers` stops its
    workers in its `finally` instead of leaving them running."""
    raise SystemExit(128 + signum)


def run_workers(
    work: Work, grid: GridSpec, cells: Sequence[Cell], out_dir: Path, workers: int
) -> None:
    """`work` (the scheduler, `run._work`) in `workers` processes, started with spawn (torch
    is not fork-safe). After a worker fails the others start no new cell (they finish
    theirs); then a GridError lists each failure by cell."""
    context = multiprocessing.get_context("spawn")
    stop, failures = context.Event(), context.SimpleQueue()
    level = logging.getLogger().getEffectiveLevel()
    running = {}
    main = threading.current_thread() is threading.main_thread()  # signals need it
    previous = signal.getsignal(signal.SIGTERM)
    ended = []
    try:  # from the handler on: a SIGTERM while workers start still stops the started ones
        if main:
            signal.signal(signal.SIGTERM, _stop_on_sigterm)
        for number in range(1, workers + 1):
            args = (number, work, grid, cells, out_dir, stop, failures, level, os.getpid())
            process = context.Process(target=_worker, args=args, name=f"graft-compare-w{number}")
            process.start()
            running[process.sentinel] = (number, process)
        while running:
            for sentinel in wait(list(running)):
                number, process = running.pop(sentinel)
                process.join()
                ended.append((number, process))
                if process.exitcode != 0:
                    stop.set()
    finally:
        stop.set()
        for _, process in running.values():  # only after an interruption of this process
            process.join(timeout=5)
            process.terminate()
            process.join()
        if main:
            signal.signal(signal.SIGTERM, previous)
    reported = {}
    while not failures.empty():
        number, message = failures.get()
        reported[number] = message
    errors = []
    for number, process in sorted(ended):
        if process.exitcode == 0:
            continue
        message = reported.get(number)
        if message is None:  # killed, or interrupted: its lock is stale now, remove it
            held = remove_locks_of(cells, process.pid)
            message = f"worker {number} ended with exit code {process.exitcode}" + "".join(
                f" in cell {cell.cell_id}" for cell in held
            )
        errors.append(message)
    if errors:
        raise GridError("; ".join(errors))
