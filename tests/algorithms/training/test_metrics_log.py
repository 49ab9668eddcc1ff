"""metrics.jsonl on resume: a torn last line (a kill during the append) is dropped with a
warning; a damaged line before it is an error naming the file and line."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

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


FULL_DISK = """
import json, resource, signal, sys
from algorithms.training.metrics import MetricsLog

log = MetricsLog(sys.argv[1], tensorboard=False)
for step in range(3):
    log.write(step, "a", {"reward_mean": 0.5})
size = log.path.stat().st_size
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit, writes fail with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 20, resource.RLIM_INFINITY))
try:
    log.write(3, "a", {"reward_mean": 0.25, "note": "x" * 200})
except OSError as error:
    print(json.dumps({"error": str(error), "size": size}))
"""


def test_a_failed_append_leaves_no_torn_line_for_the_next_one(tmp_path):
    """A file-size limit fails the append part-way, as a full disk does: the log is cut back
    to its complete rows, the error names the log, and the next append follows them."""
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    reported = json.loads(done.stdout)
    log = MetricsLog(tmp_path, tensorboard=False)
    assert log.path.stat().st_size == reported["size"]  # the part written is gone again
    assert str(log.path) in reported["error"] and "\n" not in reported["error"]
    assert (
        "row of step 3 (a) was not written (the log keeps its earlier rows only)"
        in (reported["error"])
    )
    log.write(3, "a", {"reward_mean": 0.75})
    assert [(row["step"], row["reward_mean"]) for row in log.rows()][-2:] == [(2, 0.5), (3, 0.75)]
