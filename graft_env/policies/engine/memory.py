"""GPU memory per phase of a step: allocated, reserved and peak, the device's used memory, and
what `empty_cache` returns.

`PhaseMemory` wraps each phase (generate, score, update, sync) in `phase(name)`: the peak
counter is reset on entry and on exit the phase's figures are noted: the trainer process's
allocated, reserved and peak allocated bytes (torch's caching allocator sees only its own
process), and the device-wide used memory (`mem_get_info`: total less free), which counts
every process on the GPU, the vLLM engine's share and contexts included; `release(name)` empties
torch's caching allocator (and collects CUDA IPC blocks) and notes the reserved bytes it gave
back. `metrics()` hands the noted figures over as metric keys and forgets them, so each
step's row carries its own phases (verl's `log_gpu_memory_usage` around each switch of its
hybrid engine is the anchor). Without CUDA every method is a no-op and `metrics()` is {}.

`cuda` is the `torch.cuda` surface it reads (`is_available`, `memory_allocated`,
`memory_reserved`, `max_memory_allocated`, `mem_get_info`, `reset_peak_memory_stats`,
`empty_cache`, `ipc_collect`): a test passes a fake one.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

import torch

GIB = 2**30


def phase_metrics(
    phase: str, allocated: int, reserved: int, peak: int, device_used: int
) -> dict[str, float]:
    """The metric keys of one phase's figures (bytes in, GiB out); `device_used`: the whole
    device's used bytes, every process's."""
    return {
        f"memory/{phase}/allocated_gib": allocated / GIB,
        f"memory/{phase}/reserved_gib": reserved / GIB,
        f"memory/{phase}/peak_gib": peak / GIB,
        f"memory/{phase}/device_used_gib": device_used / GIB,
    }


def release_metrics(when: str, reserved_before: int, reserved_after: int) -> dict[str, float]:
    """The metric keys of one `empty_cache`: what stayed reserved and what went back."""
    return {
        f"memory/empty_cache_{when}/reserved_gib": reserved_after / GIB,
        f"memory/empty_cache_{when}/released_gib": (reserved_before - reserved_after) / GIB,
    }


class PhaseMemory:
    """The GPU memory figures of one process's phases, collected until `metrics()`."""

    def __init__(self, cuda: Any = None) -> None:
        self.cuda = torch.cuda if cuda is None else cuda
        self.enabled = bool(self.cuda.is_available())
        self._noted: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Note allocated, reserved, the peak allocated inside and the device's used memory at
        its end, as phase `name`."""
        if not self.enabled:
            yield
            return
        self.cuda.reset_peak_memory_stats()
        try:
            yield
        finally:
            free, total = self.cuda.mem_get_info()
            self._noted.update(
                phase_metrics(
                    name,
                    self.cuda.memory_allocated(),
                    self.cuda.memory_reserved(),
                    self.cuda.max_memory_allocated(),
                    total - free,
                )
            )

    def release(self, when: str) -> None:
        """Give torch's cached blocks (and CUDA IPC blocks other processes let go of) back
        to the driver, noting how much, as `empty_cache_<when>`."""
        if not self.enabled:
            return
        gc.collect()  # tensors only a reference cycle keeps alive
        before = self.cuda.memory_reserved()
        self.cuda.empty_cache()
        self.cuda.ipc_collect()
        self._noted.update(release_metrics(when, before, self.cuda.memory_reserved()))

    def metrics(self) -> dict[str, float]:
        """Everything noted since the last call, as metric keys."""
        noted, self._noted = self._noted, {}
        return noted
