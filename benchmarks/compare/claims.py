"""Which process runs which cell of a grid: claims through lock files.

A process that runs a cell holds `claim.lock` (its pid and host) in the cell's directory.
`claim_next` takes the first cell in plan order that is unfinished, not held by a live
process and whose sources (a stored peer's run, a library's runs) have finished; the lock
of a process that has ended is taken over. Picking and locking happen under one flock on
the output directory, so two processes (`graft compare --workers N`, or commands started
by hand on one `--out`) never take the same cell.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.compare.cells import Cell, read_result

LOCK_FILE = "claim.lock"  # in a cell's directory while a process runs the cell
CLAIMS_MUTEX = ".claims.lock"  # in the output directory


@dataclass(frozen=True)
class Holder:
    """The process that holds a cell's lock."""

    pid: int
    host: str

    @classmethod
    def me(cls) -> Holder:
        return cls(os.getpid(), socket.gethostname())

    def alive(self) -> bool:
        """False only for a holder known to be gone: a pid of this host that no longer runs,
        or this process's own pid (it holds no lock while it claims: that lock is from an
        earlier process with the same pid, as after a container restart). Another host's
        pid cannot be checked: its lock stands until that process removes it."""
        if self.host != socket.gethostname():
            return True
        if self.pid == os.getpid():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's live process
            return True
        return True

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"


@dataclass(frozen=True)
class Claim:
    """What `claim_next` found: the cell now locked by this process (None: none it could
    take) and the unfinished cells it could not take, with why; both empty: all finished."""

    cell: Cell | None
    waiting: tuple[str, ...]


def _holder(cell: Cell) -> Holder | None:
    path = cell.directory / LOCK_FILE
    if not path.is_file():
        return None
    return Holder(**json.loads(path.read_text()))


def _lock(cell: Cell) -> None:
    """Write this process's lock on `cell`; FileExistsError if it has one."""
    cell.directory.mkdir(parents=True, exist_ok=True)
    lock = cell.directory / LOCK_FILE
    tmp = lock.with_name(f".{LOCK_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(dataclasses.asdict(Holder.me())))
    try:
        os.link(tmp, lock)  # like O_CREAT | O_EXCL, but a lock is never seen half-written
    finally:
        tmp.unlink()


def release(cell: Cell) -> None:
    """Remove this process's lock on `cell` (a lock of another process stays)."""
    if _holder(cell) == Holder.me():
        (cell.directory / LOCK_FILE).unlink()


@contextlib.contextmanager
def _claims_mutex(out_dir: Path) -> Iterator[None]:
    """Held while a process picks and locks a cell, so that two processes never take over
    the same stale lock (each would remove the other's fresh one)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / CLAIMS_MUTEX, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or its process dies
        yield


def claim_next(
    cells: Sequence[Cell],
    out_dir: str | Path,
    say: Callable[[str], None],
    ran: Collection[str] = (),
) -> Claim:
    """Lock the first cell in plan order that is unfinished, not held by a live process,
    and whose sources (the runs whose stores it replays or builds its library from) are
    finished; the lock of a dead process is taken over, said in one line. `ran`: ids of
    the cells this process ran, finished whatever their directories say (a cell runs at
    most once per process)."""
    by_id = {cell.cell_id: cell for cell in cells}

    def finished(cell: Cell) -> bool:
        return cell.cell_id in ran or read_result(cell) is not None

    waiting = []
    with _claims_mutex(Path(out_dir)):
        for cell in cells:
            if finished(cell):
                continue
            holder = _holder(cell)
            if holder is not None and holder.alive():
                waiting.append(f"{cell.cell_id} ({holder})")
                continue
            pending = [source for source in cell.sources if not finished(by_id[source])]
            if pending:
                waiting.append(f"{cell.cell_id} (after {', '.join(pending)})")
                continue
            if holder is not None:
                say(f"{cell.cell_id}: taking over the stale lock of {holder}, which has ended")
                (cell.directory / LOCK_FILE).unlink()
            _lock(cell)
            return Claim(cell, ())
    return Claim(None, tuple(waiting))


def remove_locks_of(cells: Sequence[Cell], pid: int) -> list[Cell]:
    """Remove the locks that process `pid` of this host left (it was killed); the cells."""
    gone = dataclasses.replace(Holder.me(), pid=pid)
    held = [cell for cell in cells if _holder(cell) == gone]
    for cell in held:
        (cell.directory / LOCK_FILE).unlink()
    return held
