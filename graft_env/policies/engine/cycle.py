"""The vLLM engine's memory lifecycle over one training step, in one place.

One step, in the order verl's hybrid engine (`fsdp_workers.ActorRolloutRefWorker.rollout_mode`:
`aggressive_empty_cache`, `resume(tags=["weights"])`, `update_weights`, empty cache again,
`resume(tags=["kv_cache"])`; `release()` = `sleep(level)` after generation), OpenRLHF
(`RolloutRayActor.wake_up(tags)`, one tag at a time) and TRL's colocate mode (`sleep` after
generation, `wake_up(tags=["weights"])` before the sync, `["kv_cache"]` after) follow:

    1. generate              weights and KV cache awake
    2. sleep(level)          right after generating: level 2 (weights dropped, not copied
                             to CPU) where every sync rewrites all weights, else level 1
    3. score, update         the engine asleep: the trainer has the GPU
    4. empty_cache           (+ ipc_collect) the update's cached blocks go back to the driver
                             before vLLM maps anything again
    5. wake_up(["weights"])
    6. sync                  the bucketed weight load
    7. empty_cache           the sync's staging buffers and gathered tensors
    8. wake_up(["kv_cache"]) just before the next generate

`EngineCycle` keeps that order for one engine: `generate(run)` does 8, 1 and 2 around
`run()`, `sync(run)` does 4 to 7 around it. Without sleep mode (CPU) only the two
`empty_cache` calls remain (no-ops without CUDA). After a level-2 sleep the engine has no
weights: `needs_sync` says so, and a caller that generates again before an update syncs
first (a second rollout in one step: dynamic sampling, evaluation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class SleepingEngine(Protocol):
    """What the cycle drives: `engine.llm.VLLMEngine`, or a test's recording fake."""

    sleep_mode: bool

    def sleep(self, level: int) -> None: ...

    def wake_up(self, tags: list[str]) -> None: ...


class EngineCycle:
    """The lifecycle above for one engine. `level` is the sleep level (2 where the sync
    rewrites every weight); `release(when)` empties the allocator's cache
    (`engine.memory.PhaseMemory.release`)."""

    def __init__(self, engine: SleepingEngine, level: int, release: Callable[[str], None]) -> None:
        if level not in (1, 2):
            raise ValueError(f"vLLM sleep level {level}: must be 1 or 2")
        self.engine, self.level, self.release = engine, level, release
        self.weights_awake = self.kv_awake = True  # a new engine is awake
        self.weights_lost = False  # a level-2 sleep dropped them, no sync since

    @property
    def needs_sync(self) -> bool:
        """The engine's weights were dropped (level 2) and not synced since."""
        return self.weights_lost

    def generate(self, run: Callable[[], T]) -> T:
        """Steps 8, 1, 2: wake what sleeps, generate, sleep again."""
        if self.weights_lost:
            raise RuntimeError("the engine's weights were dropped by a level-2 sleep: sync first")
        self._wake(["weights", "kv_cache"])
        try:
            return run()
        finally:
            self.asleep()

    def asleep(self) -> None:
        """Step 2 (also before an update that did not follow a generate)."""
        if self.engine.sleep_mode and (self.weights_awake or self.kv_awake):
            self.engine.sleep(self.level)
            self.weights_awake = self.kv_awake = False
            self.weights_lost = self.level == 2

    def sync(self, run: Callable[[], T]) -> T:
        """Steps 4 to 7 around the weight load `run()`; the KV cache stays asleep."""
        self.asleep()
        self.release("before_sync")
        self._wake(["weights"])
        result = run()
        self.weights_lost = False
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
