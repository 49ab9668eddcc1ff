"""`policies.engine.cycle.EngineCycle`: the engine's lifecycle with a recording engine."""

from __future__ import annotations

import pytest

from graft_env.policies.engine.cycle import EngineCycle


class Engine:
    """Records sleep / wake_up calls; `awake` says what is mapped."""

    def __init__(self, sleep_mode: bool = True) -> None:
        self.sleep_mode, self.calls = sleep_mode, []
        self.awake = {"weights", "kv_cache"}

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep({level})")
        self.awake = set()

    def wake_up(self, tags: list[str]) -> None:
        self.calls.append(f"wake_up({','.join(tags)})")
        self.awake |= set(tags)


def _cycle(level: int, sleep_mode: bool = True) -> tuple[EngineCycle, Engine, list[str]]:
    engine = Engine(sleep_mode)
    calls = engine.calls
    cycle = EngineCycle(engine, level, lambda when: calls.append(f"empty_cache({when})"))
    return cycle, engine, calls


@pytest.mark.parametrize("level", [1, 2])
def test_one_step_runs_in_the_anchors_order(level):
    cycle, engine, calls = _cycle(level)

    def generate():
        calls.append(f"generate{sorted(engine.awake)}")

    def load():
        calls.append(f"load{sorted(engine.awake)}")

    cycle.generate(generate)
    cycle.asleep()  # score, update: nothing more to do
    cycle.sync(load)
    cycle.generate(generate)
    assert calls == [
        "generate['kv_cache', 'weights']",
        f"sleep({level})",
        "empty_cache(before_sync)",
        "wake_up(weights)",
        "load['weights']",
        "empty_cache(after_sync)",
        "wake_up(kv_cache)",
        "generate['kv_cache', 'weights']",
        f"sleep({level})",
    ]


def test_level_1_wakes_both_for_a_second_rollout_level_2_needs_a_sync_first():
    cycle, _, calls = _cycle(1)
    cycle.generate(lambda: None)
    cycle.generate(lambda: None)
    assert calls == ["sleep(1)", "wake_up(weights)", "wake_up(kv_cache)", "sleep(1)"]
    cycle, _, _ = _cycle(2)
    cycle.generate(lambda: None)
    assert cycle.needs_sync
    with pytest.raises(RuntimeError, match="dropped by a level-2 sleep: sync first"):
        cycle.generate(lambda: None)
    cycle.sync(lambda: None)
    assert not cycle.needs_sync


def test_without_sleep_mode_only_the_cache_is_emptied_and_a_failed_rollout_still_sleeps():
    cycle, _, calls = _cycle(2, sleep_mode=False)
    cycle.generate(lambda: None)
    cycle.sync(lambda: None)
    assert calls == ["empty_cache(before_sync)", "empty_cache(after_sync)"]
    cycle, _, calls = _cycle(1)
    with pytest.raises(ValueError, match="boom"):
        cycle.generate(lambda: (_ for _ in ()).throw(ValueError("boom")))
    assert calls == ["sleep(1)"]
    with pytest.raises(ValueError, match="sleep level 3"):
        EngineCycle(Engine(), 3, lambda when: None)
