"""`policies.engine.memory.PhaseMemory`: per-phase metric keys, read from a fake `torch.cuda`
whose device also holds another process's memory (a vLLM engine's share)."""

from __future__ import annotations

from graft_env.policies.engine.memory import GIB, PhaseMemory, phase_metrics


class FakeCuda:
    """`torch.cuda`'s memory surface over settable counters; `others` is what other processes
    hold on the device (an engine), which only `mem_get_info` sees."""

    def __init__(self, available: bool = True) -> None:
        self.available = available
        self.allocated = self.reserved = self.peak = self.others = 0
        self.total = 80 * GIB
        self.calls: list[str] = []

    def is_available(self) -> bool:
        return self.available

    def memory_allocated(self) -> int:
        return self.allocated

    def memory_reserved(self) -> int:
        return self.reserved

    def max_memory_allocated(self) -> int:
        return self.peak

    def mem_get_info(self) -> tuple[int, int]:
        return self.total - self.reserved - self.others, self.total  # (free, total)

    def reset_peak_memory_stats(self) -> None:
        self.calls.append("reset_peak")
        self.peak = self.allocated

    def empty_cache(self) -> None:
        self.calls.append("empty_cache")
        self.reserved = self.allocated

    def ipc_collect(self) -> None:
        self.calls.append("ipc_collect")


def test_each_phase_notes_allocated_reserved_and_its_own_peak_once():
    cuda = FakeCuda()
    memory = PhaseMemory(cuda)
    cuda.allocated, cuda.reserved, cuda.others = 2 * GIB, 3 * GIB, GIB  # the engine asleep
    with memory.phase("update"):
        cuda.peak, cuda.allocated, cuda.reserved = 9 * GIB, 4 * GIB, 10 * GIB
    memory.release("before_sync")
    with memory.phase("sync"):
        cuda.peak, cuda.others = 5 * GIB, 7 * GIB  # its weights woken
    assert memory.metrics() == {
        "memory/update/allocated_gib": 4.0,
        "memory/update/reserved_gib": 10.0,
        "memory/update/peak_gib": 9.0,
        "memory/update/device_used_gib": 11.0,
        "memory/empty_cache_before_sync/reserved_gib": 4.0,
        "memory/empty_cache_before_sync/released_gib": 6.0,
        "memory/sync/allocated_gib": 4.0,
        "memory/sync/reserved_gib": 4.0,
        "memory/sync/peak_gib": 5.0,
        "memory/sync/device_used_gib": 11.0,  # 4 of the trainer's + the engine's 7
    }
    assert cuda.calls == ["reset_peak", "empty_cache", "ipc_collect", "reset_peak"]
    assert memory.metrics() == {}  # handed over once: each step's row has its own


def test_without_cuda_nothing_is_read_or_noted():
    cuda = FakeCuda(available=False)
    memory = PhaseMemory(cuda)
    with memory.phase("generate"):
        pass
    memory.release("after_sync")
    assert memory.metrics() == {} and cuda.calls == []
    assert phase_metrics("score", GIB, 2 * GIB, 3 * GIB, 4 * GIB)["memory/score/peak_gib"] == 3.0
