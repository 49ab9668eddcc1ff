"""CPU threads: how many torch uses and how its OpenMP threads wait, chosen before torch starts.

Two processes that each keep as many OpenMP threads as there are cores stall each other at
every barrier: a thread that has finished its share spins on its core, waiting for one
that cannot get a core. Measured on 2 cores: a 6-step `graft train` with 2 threads beside
one other busy process took 267-340 s instead of 12.4 s with one thread, and two identical
runs ended with different weights. So:

- a run uses one torch thread unless told otherwise (`threads` in the run config, or the
  user's own ``OMP_NUM_THREADS``): one thread never oversubscribes cores that other
  processes share, and its results do not depend on the machine's load (reruns are
  bit-identical); more threads are faster only on cores nobody else uses;
- idle OpenMP threads sleep instead of spinning (``OMP_WAIT_POLICY=PASSIVE``). The OpenMP
  runtime reads its environment once, when torch loads, so every entry point (the `graft`
  CLI, the `benchmarks` package) calls `process_defaults` before torch is imported;
- helper processes (the verifier workers) run one thread whatever their parent uses.

A user's explicit ``OMP_NUM_THREADS`` / ``OMP_WAIT_POLICY`` always wins over these defaults.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping, MutableMapping

DEFAULT_THREADS = 1
WAIT_POLICY = "PASSIVE"
THREADS_VAR = "OMP_NUM_THREADS"
WAIT_POLICY_VAR = "OMP_WAIT_POLICY"


def process_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """One thread and passive waiting for this process and its children, unless the user set
    them; call before torch is imported (afterwards it only reaches child processes)."""
    environ.setdefault(THREADS_VAR, str(DEFAULT_THREADS))
    environ.setdefault(WAIT_POLICY_VAR, WAIT_POLICY)


def resolve_threads(threads: int | None, environ: Mapping[str, str] = os.environ) -> int:
    """The torch threads of a run: `threads` if set, else ``$OMP_NUM_THREADS``, else 1."""
    if threads is not None:
        return threads
    raw = environ.get(THREADS_VAR, "").strip()
    if not raw:
        return DEFAULT_THREADS
    first = raw.split(",")[0].strip()  # OpenMP's nested form "4,2": the outer level
    if not first.isdigit() or int(first) < 1:
        raise ValueError(
            f"{THREADS_VAR}={raw!r} is not a thread count >= 1; unset it or set threads=N"
        )
    return int(first)


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the body with `threads` torch intra-op threads; the previous count comes back."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def single_thread_process(environ: MutableMapping[str, str] = os.environ) -> None:
    """Make this helper process single-threaded: ``OMP_NUM_THREADS=1`` (a helper shares the
    cores with its parent and its siblings, so the user's count is not for it), passive
    waiting unless the user chose a policy, and one torch thread if torch is already loaded."""
    environ[THREADS_VAR] = "1"
    environ.setdefault(WAIT_POLICY_VAR, WAIT_POLICY)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
