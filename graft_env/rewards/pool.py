"""A pool of verifier processes with a hard per-item time limit enforced by the parent.

Why processes: math-verify times out with ``signal.alarm``, which only works in a main
thread and cannot interrupt C-level work (a huge integer power, a runaway simplification).
Each worker is a separate process handling one item at a time; the parent gives every item
a deadline and kills and replaces a worker that overruns it, so no input can hold a batch
longer than the limit plus a small overhead, and ``verify_batch`` can be called from any
thread. Workers start once (``forkserver`` where available, so they are safe to start from
a process that already runs threads or torch) and are reused across batches. Each runs one
passive OpenMP thread, set in the fork server before anything a worker imports starts
(`_one_thread`; under spawn, workers inherit the parent's settings).

Unlike other ``forkserver`` processes, the workers do not import the program's main module
again (`_without_main`), so a script needs no ``if __name__ == "__main__":`` guard to verify,
code from stdin verifies too, and the script's own imports are not repeated in every worker.
Under plain ``spawn`` (no fork server on the platform), or when something else started the
fork server first, workers import the main module as any spawned process does, and a script
must then create its pool under that guard.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import cast

from graft_env.rewards import _preload, _worker
from graft_env.rewards.checker import DEFAULT_MAX_CHARS, response_tail, validate_limits
from graft_env.rewards.verdict import Verdict

ONE_THREAD_MODULE = "graft_env.rewards._one_thread"
"""Preloaded by the fork server; named, never imported here (it makes its importer one-threaded)."""

WITHOUT_MAIN_MODULE = "graft_env.rewards._without_main"
"""Preloaded by the fork server; named, never imported here (it changes how its importer
prepares new processes)."""

STARTUP_TIMEOUT_S = 120.0
"""How long a new worker may take to import math-verify and warm up (slow shared CPUs)."""


def _context() -> BaseContext:
    """``forkserver`` (thread/torch safe, cheap respawns from a preloaded server) or spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        # Process-wide setting; it only takes effect if the fork server is not running yet.
        # Otherwise (another library started it first) workers import and warm up
        # math-verify themselves, which is slower but equally correct, and inherit that
        # server's thread settings. ONE_THREAD_MODULE comes first: it sets the environment that
        # everything imported after it starts under.
        context.set_forkserver_preload([ONE_THREAD_MODULE, WITHOUT_MAIN_MODULE, _preload.__name__])
        return context
    return multiprocessing.get_context("spawn")


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(eq=False)
class _Worker:
    """Parent-side view of one worker process."""

    process: BaseProcess
    conn: Connection
    started_at: float
    ready: bool = False
    job: int | None = None
    deadline: float = 0.0
    extracted: str | None = None


class VerifierPool:
    """Verify batches of responses in worker processes; see the module docstring.

    Args:
        num_workers: worker processes (default: the CPUs this process may use).
        timeout_s: hard wall-clock limit per item, measured from dispatch to a worker.
        max_chars: responses longer than this are checked only on their last ``max_chars``
            characters (the final answer is at the end; this keeps 1 MB inputs cheap).
    """

    def __init__(
        self,
        num_workers: int | None = None,
        timeout_s: float = 5.0,
        max_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        if num_workers is None:
            num_workers = _usable_cpus()
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
        validate_limits(timeout_s, max_chars)
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        self.max_chars = max_chars
        self._context = _context()
        self._lock = threading.Lock()
        self._closed = False
        self._workers: list[_Worker] = []
        try:
            for _ in range(num_workers):
                self._workers.append(self._spawn())
            while not all(worker.ready for worker in self._workers):
                self._wait_for_events([])
        except BaseException:
            self.close()
            raise

    # -- public API -------------------------------------------------------------------

    def verify_batch(
        self,
        responses: Sequence[str],
        golds: Sequence[str],
        *,
        timeout_s: float | None = None,
    ) -> list[Verdict]:
        """Verdicts for ``responses[i]`` against ``golds[i]``, in input order.

        Items are spread over the workers; each gets at most ``timeout_s`` (default: the
        pool's) of wall-clock time before its worker is killed, replaced and the item
        scored ``timeout``. A worker crash scores its item ``error``. Safe to call from any
        thread; concurrent calls on one pool run one after another.
        """
        if len(responses) != len(golds):
            raise ValueError(f"verify_batch got {len(responses)} responses but {len(golds)} golds")
        for name, items in (("responses", responses), ("golds", golds)):
            for index, item in enumerate(items):
                if not isinstance(item, str):
                    raise TypeError(f"{name}[{index}] must be str, got {type(item).__name__}")
        limit = self.timeout_s if timeout_s is None else timeout_s
        validate_limits(limit, self.max_chars)
        with self._lock:
            if self._closed:
                raise RuntimeError("VerifierPool is closed")
            try:
                return self._run_batch(responses, golds, float(limit))
            except BaseException:
                # A failed batch (e.g. workers that cannot start, or Ctrl-C) leaves workers
                # mid-job; the pool cannot be trusted afterwards.
                self._shutdown()
                raise

    @property
    def worker_pids(self) -> list[int | None]:
        """Process ids of the current workers (they change when a worker is replaced)."""
        return [worker.process.pid for worker in self._workers]

    @property
    def running(self) -> list[str | None]:
        """Per worker running an item now, the answer it reported extracting (None until it
        has): read without the batch lock, so another thread can watch a batch in progress."""
        return [worker.extracted for worker in self._workers if worker.job is not None]

    def close(self) -> None:
        """Stop all workers; further ``verify_batch`` calls raise. Idempotent."""
        with self._lock:
            self._shutdown()

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- batch scheduling -------------------------------------------------------------

    def _run_batch(
        self, responses: Sequence[str], golds: Sequence[str], limit: float
    ) -> list[Verdict]:
        verdicts: list[Verdict | None] = [None] * len(responses)
        pending = deque(range(len(responses)))
        while pending or any(worker.job is not None for worker in self._workers):
            for slot, worker in enumerate(self._workers):
                if pending and worker.ready and worker.job is None:
                    index = pending.popleft()
                    job = (index, response_tail(responses[index], self.max_chars), golds[index])
                    if not self._dispatch(slot, job, limit):
                        pending.appendleft(index)
            self._wait_for_events(verdicts)
        missing = [index for index, verdict in enumerate(verdicts) if verdict is None]
        if missing:
            raise RuntimeError(f"verifier pool lost the verdicts of items {missing}")
        return cast(list[Verdict], verdicts)

    def _dispatch(self, slot: int, job: tuple[int, str, str], limit: float) -> bool:
        """Send a job to an idle worker; False (worker replaced) if it had died meanwhile."""
        worker = self._workers[slot]
        try:
            worker.conn.send((*job, limit))
        except (OSError, EOFError):
            self._replace(slot)
            return False
        worker.job = job[0]
        worker.deadline = time.monotonic() + limit
        worker.extracted = None
        return True

    def _wait_for_events(self, verdicts: list[Verdict | None]) -> None:
        """Block until a message, a worker death or the earliest deadline; handle them."""
        active = [slot for slot, worker in enumerate(self._workers) if self._is_active(worker)]
        if not active:
            return
        workers = [self._workers[slot] for slot in active]
        earliest = min(self._deadline(worker) for worker in workers)
        waitables = [w.conn for w in workers] + [w.process.sentinel for w in workers]
        wait(waitables, timeout=max(0.0, earliest - time.monotonic()))
        for slot in active:
            self._service(slot, verdicts)

    @staticmethod
    def _is_active(worker: _Worker) -> bool:
        """Running a job or still starting: the states that have a deadline."""
        return worker.job is not None or not worker.ready

    def _deadline(self, worker: _Worker) -> float:
        return worker.deadline if worker.ready else worker.started_at + STARTUP_TIMEOUT_S

    def _service(self, slot: int, verdicts: list[Verdict | None]) -> None:
        """Read what a worker sent; then handle its death or an overrun deadline."""
        worker = self._workers[slot]
        alive = True
        try:
            while worker.conn.poll():
                self._handle_message(worker, worker.conn.recv(), verdicts)
        except (OSError, EOFError):
            alive = False
        alive = alive and worker.process.is_alive()
        overdue = self._is_active(worker) and time.monotonic() >= self._deadline(worker)
        if alive and not overdue:
            return
        if not worker.ready:
            if alive:
                raise RuntimeError(
                    f"verifier worker was not ready {STARTUP_TIMEOUT_S:.0f} s after start"
                )
            worker.process.join(timeout=1.0)
            raise RuntimeError(
                f"verifier worker died while starting (exit code {worker.process.exitcode}). "
                "Workers re-import the main script: a script that creates a VerifierPool "
                "must do so under `if __name__ == '__main__':`"
            )
        if worker.job is not None:
            status = "error" if not alive else "timeout"
            verdicts[worker.job] = Verdict(0.0, status, worker.extracted)
        self._replace(slot)

    def _handle_message(
        self, worker: _Worker, message: tuple, verdicts: list[Verdict | None]
    ) -> None:
        kind = message[0]
        if kind == _worker.READY:
            worker.ready = True
            return
        index = message[1]
        if index != worker.job:
            raise RuntimeError(f"verifier worker answered job {index} while running {worker.job}")
        if kind == _worker.EXTRACTED:
            worker.extracted = message[2]
        elif kind == _worker.DONE:
            verdicts[index] = message[2]
            worker.job = None
        else:
            raise RuntimeError(f"verifier worker sent an unknown message kind {kind!r}")

    # -- process management -----------------------------------------------------------

    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_worker.worker_main, args=(child_conn,), daemon=True, name=_worker.WORKER_NAME
        )
        process.start()
        # Drop our copy of the child's end so the parent sees EOF when the worker dies.
        child_conn.close()
        return _Worker(process=process, conn=parent_conn, started_at=time.monotonic())

    def _replace(self, slot: int) -> None:
        self._stop(self._workers[slot], graceful=False)
        self._workers[slot] = self._spawn()

    @staticmethod
    def _stop(worker: _Worker, graceful: bool) -> None:
        if graceful and worker.process.is_alive():
            with contextlib.suppress(OSError, EOFError):
                worker.conn.send(None)
            worker.process.join(timeout=1.0)
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join()
        worker.conn.close()

    def _shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        for worker in self._workers:
            self._stop(worker, graceful=worker.ready and worker.job is None)
        self._workers = []
