"""What another process leaves in a grid cell's directory: its claim lock, its result."""

from __future__ import annotations

import json
import socket

from benchmarks.compare.cells import RESULT_FILE
from benchmarks.compare.claims import LOCK_FILE

HOST = socket.gethostname()


def write_lock(cell, pid: int, host: str = HOST) -> None:
    """The lock another process would hold on `cell`."""
    cell.directory.mkdir(parents=True, exist_ok=True)
    (cell.directory / LOCK_FILE).write_text(json.dumps({"pid": pid, "host": host}))


def finish(cell) -> None:
    """A finished result, as `run_cell` writes it (only what `read_result` checks)."""
    cell.directory.mkdir(parents=True, exist_ok=True)
    result = {"cell": cell.cell_id, "config_hash": cell.config_hash}
    (cell.directory / RESULT_FILE).write_text(json.dumps(result))
