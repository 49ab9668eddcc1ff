"""The vLLM engine's memory lifecycle over one training step, in one place.

One step, in the order verl's hybrid engine (`fsdp_workers.ActorRolloutRefWorker.rollout_mode`:
`aggressive_empty_cache`, `resume(tags=["weights"])`, `update_weights`, empty cache again,
`resume(tags=["kv_cache"])`; `release()` = `sleep(level)` after generation), OpenRLHF
(`RolloutRayActor.wake_up(tags)`, one tag at a time) and TRL's colocate mode (`sleep` after
generation, `wake_up(tags=["weights"])` before the sync, `["kv_cache"]` after) follow:

    1. generate              weights and KV cache awake
    2. sleep(1)              right after generating: the weights go to CPU memory, the KV
                             cache is dropped (the sync sends only the blocks that changed,
                             so the rest must survive the sleep: level 1, not 2)
    3. score, update         the engine asleep: the trainer has the GPU
    4. empty_cache           (+ ipc_collect) the update's cached blocks go back to the driver
                             before vLLM maps anything again
    5. wake_up(["weights"])
    6. sync                  the weight load
    7. empty_cache           what the sync left cached
    8. wake_up(["kv_cache"]) just before the next generate

`EngineCycle` keeps that order for one engine: `generate(run)` does 8, 1 and 2 around
`run()`, `sync(run)` does 4 to 7 around it. Without sleep mode (CPU) only the two
`empty_cache` calls remain (no-ops without CUDA).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")
SLEEP_LEVEL = 1  # the incremental sync leaves unchanged blocks to survive the sleep


class SleepingEngine(Protocol):
    """What the cycle drives: `engine.llm.VLLMEngine`, or a test's recording fake."""

    sleep_mode: bool

    def sleep(self, level: int) -> None: ...

    def wake_up(self, tags: list[str]) -> None: ...


class EngineCycle:
    """The lifecycle above for one engine; `release(when)` empties the allocator's cache
    (`engine.memory.PhaseMemory.release`)."""

    def __init__(self, engine: SleepingEngine, release: Callable[[str], None]) -> None:
        self.engine, self.release = engine, release
        self.weights_awake = self.kv_awake = True  # a new engine is awake

    def generate(self, run: Callable[[], T]) -> T:
        """Steps 8, 1, 2: wake what sleeps, generate, sleep again."""
        self._wake(["weights", "kv_cache"])
        try:
            return run()
        finally:
            self.asleep()

    def asleep(self) -> None:
        """Step 2 (also before an update that did not follow a generate)."""
        if self.engine.sleep_mode and (self.weights_awake or self.kv_awake):
            self.engine.sleep(SLEEP_LEVEL)
            self.weights_awake = self.kv_awake = False

    def sync(self, run: Callable[[], T]) -> T:
        """Steps 4 to 7 around the weight load `run()`; the KV cache stays asleep."""
        self.asleep()
        self.release("before_sync")
        self._wake(["weights"])
        result = run()
        self.release("after_sync")
        return result

    def _wake(self, tags: list[str]) -> None:
        if not self.engine.sleep_mode:
            return
        for tag in tags:  # one tag at a time: weights first, the KV cache last
            if tag == "weights" and not self.weights_awake:
                self.engine.wake_up(["weights"])
                self.weights_awake = True
            elif tag == "kv_cache" and not self.kv_awake:
                self.engine.wake_up(["kv_cache"])
                self.kv_awake = True
