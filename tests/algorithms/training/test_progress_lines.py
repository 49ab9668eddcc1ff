"""Without a terminal (CI, nohup, a log file) the progress is one plain line per step, not
one squashed bar at the end."""

from __future__ import annotations

from types import SimpleNamespace

from algorithms.training.progress import StepProgress


def _record(reward: float) -> SimpleNamespace:
    metrics = {"a": {"reward_mean": reward, "all_fail_share": 0.5}}
    return SimpleNamespace(metrics=metrics, transfers={"a": [[1], [2]]})


def test_without_a_terminal_every_step_prints_its_own_line(capsys):
    with StepProgress(total=4, start=1, enabled=True) as progress:
        for reward in (0.25, 0.5, 0.75):
            progress.update(_record(reward))
            assert capsys.readouterr().out.count("\n") == 1  # at once, not at the end
    assert capsys.readouterr().out == ""


def test_the_lines_count_from_the_resumed_step_and_say_what_moved(capsys):
    with StepProgress(total=4, start=1, enabled=True) as progress:
        progress.update(_record(0.25))
        progress.update(_record(0.5))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["train", "2/4"], ["train", "3/4"]]
    assert lines[1].endswith("a r=0.50 fail=0.50 got=2")


def test_disabled_progress_prints_nothing(capsys):
    with StepProgress(total=2, start=0, enabled=False) as progress:
        progress.update(_record(0.5))
    assert capsys.readouterr().out == ""
