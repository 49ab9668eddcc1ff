"""A lazily created, process-wide :class:`VerifierPool` behind :func:`verify_batch`.

Why: most callers (the environment, the training loop, evaluation) just want rewards and
should share one set of worker processes instead of each starting its own. The pool starts
on first use and is closed when the interpreter exits.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Sequence

from graft_env.rewards.pool import VerifierPool
from graft_env.rewards.verdict import Verdict

_lock = threading.Lock()
_pool: VerifierPool | None = None


def default_pool() -> VerifierPool:
    """The shared pool, started on first call (one worker per usable CPU)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = VerifierPool()
            atexit.register(_pool.close)
        return _pool


def verify_batch(
    responses: Sequence[str], golds: Sequence[str], *, timeout_s: float = 5.0
) -> list[Verdict]:
    """Verify ``responses[i]`` against ``golds[i]`` on the shared pool (any thread)."""
    return default_pool().verify_batch(responses, golds, timeout_s=timeout_s)
