"""Body of one verifier worker process.

Protocol over the worker's own pipe (one job at a time, so the parent's per-item deadline
is exact):

- parent -> worker: ``(index, response_tail, gold, timeout_s)``, or ``None`` to stop.
- worker -> parent: ``("ready",)`` once warmed up; per job ``("extracted", index, text)``
  as soon as the answer is extracted (so a killed job still reports what it extracted),
  then ``("done", index, Verdict)``.
"""

from __future__ import annotations

import functools
import signal
from multiprocessing.connection import Connection

from graft_env.rewards.checker import check_response, warm_up

WORKER_NAME = "graft-verifier"
"""Every worker's process name (`_without_main` recognises workers by it)."""

READY = "ready"
EXTRACTED = "extracted"
DONE = "done"


def _send_extracted(conn: Connection, index: int, answer: str) -> None:
    conn.send((EXTRACTED, index, answer))


def worker_main(conn: Connection) -> None:
    """Serve verification jobs until told to stop or the parent goes away."""
    # Ctrl-C goes to the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warm_up()
    conn.send((READY,))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        index, response, gold, timeout_s = job
        report_extracted = functools.partial(_send_extracted, conn, index)
        verdict = check_response(response, gold, timeout_s, report_extracted)
        conn.send((DONE, index, verdict))
