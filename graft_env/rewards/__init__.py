"""Verifiable reward: the last ``\\boxed{}`` answer checked against the gold with math-verify.

Use :func:`verify_batch` (shared worker pool, any thread, hard per-item time limit) or a
:class:`VerifierPool` of your own; :func:`verify_one` verifies in the calling process (main
thread only, no hard limit) and exists as the single-process baseline. Every result is a
:class:`Verdict` with reward 0.0/1.0 and one of :data:`STATUSES`, so failures are counted
(:func:`status_counts`) rather than silently scored as wrong answers.

Modules:

checker           verify one response in this process: extract, parse, compare
default_pool      the lazily created process-wide `VerifierPool` behind `verify_batch`
pool              verifier worker processes with a hard per-item time limit
verdict           the result of one verification, and counting results by status
_one_thread       (fork server) every verifier worker runs one passive thread
_preload          (fork server) load and warm math-verify once
_without_main     (fork server) verifier workers skip the main module
_worker           the body of one verifier worker process
"""

from graft_env.rewards.checker import DEFAULT_MAX_CHARS, verify_one
from graft_env.rewards.default_pool import default_pool, verify_batch
from graft_env.rewards.pool import VerifierPool
from graft_env.rewards.verdict import STATUSES, Verdict, status_counts

__all__ = [
    "DEFAULT_MAX_CHARS",
    "STATUSES",
    "Verdict",
    "VerifierPool",
    "default_pool",
    "status_counts",
    "verify_batch",
    "verify_one",
]
