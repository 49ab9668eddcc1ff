"""metrics.jsonl on resume: a torn last line (a kill during the append) is dropped with a
warning; a damaged line before it is an error naming the file and line."""

from __future__ import annotations

import json
import logging

import pytest

from algorithms.training.metrics import MetricsError, MetricsLog


def _log_with_rows(tmp_path, steps: int) -> MetricsLog:
    log = MetricsLog(tmp_path, tensorboard=False)
    for step in range(steps):
        log.write(step, "a", {"reward_mean": 0.5})
    return log


@pytest.mark.parametrize(
    "tail",
    [
        '{"agent": "a", "reward_mean": 0.',  # killed mid-append: unterminated
        '{"agent": "a", "step": 3, "reward_mean": 0.5}',  # complete but for its newline
        '{"agent": "a", "rew\x00\x00\n',  # terminated garbage
    ],
)
def test_a_torn_last_line_is_dropped_with_a_warning(tail, tmp_path, caplog):
    log = _log_with_rows(tmp_path, 3)
    with log.path.open("a") as handle:
        handle.write(tail)
    with caplog.at_level(logging.WARNING, logger="algorithms.training.metrics"):
        log.truncate_to(4)
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(log.path) in warning and "torn" in warning and "\n" not in warning
    assert [row["step"] for row in log.rows()] == [0, 1, 2]
    assert log.path.read_text().endswith("\n")


def test_a_damaged_line_before_the_last_is_an_error_naming_file_and_line(tmp_path):
    log = _log_with_rows(tmp_path, 3)
    lines = log.path.read_text().splitlines()
    lines[1] = lines[1][:20]
    log.path.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(MetricsError, match=rf"^{log.path}:2: not a JSON metrics row"):
        log.truncate_to(3)
    lines[1] = json.dumps(["a", "list"])
    log.path.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(MetricsError, match=rf"^{log.path}:2: not a JSON metrics row"):
        log.rows()
