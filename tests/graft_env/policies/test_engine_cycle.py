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


def _cycle(sleep_mode: bool = True) -> tuple[EngineCycle, Engine, list[str]]:
    engine = Engine(sleep_mode)
    calls = engine.calls
    cycle = EngineCycle(engine, lambda when: calls.append(f"empty_cache({when})"))
    return cycle, engine, calls


def test_one_step_runs_in_the_anchors_order():
    cycle, engine, calls = _cycle()

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
        "sleep(1)",
        "empty_cache(before_sync)",
        "wake_up(weights)",
        "load['weights']",
        "empty_cache(after_sync)",
        "wake_up(kv_cache)",
        "generate['kv_cache', 'weights']",
        "sleep(1)",
    ]


def test_a_second_rollout_wakes_weights_then_kv_cache():
    cycle, _, calls = _cycle()
    cycle.generate(lambda: None)
    cycle.generate(lambda: None)
    assert calls == ["sleep(1)", "wake_up(weights)", "wake_up(kv_cache)", "sleep(1)"]


def test_without_sleep_mode_only_the_cache_is_emptied_and_a_failed_rollout_still_sleeps():
    cycle, _, calls = _cycle(sleep_mode=False)
    cycle.generate(lambda: None)
    cycle.sync(lambda: None)
    assert calls == ["empty_cache(before_sync)", "empty_cache(after_sync)"]
    cycle, _, calls = _cycle()
    with pytest.raises(ValueError, match="boom"):
        cycle.generate(lambda: (_ for _ in ()).throw(ValueError("boom")))
    assert calls == ["sleep(1)"]
