"""The `data_dir` fixture: a data test skips, saying why, when the benchmark files are absent,
and fails instead under GRAFT_REQUIRE_DATA=1 (what CI sets), so a run that lost its data
cannot pass on skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DATA_TEST = "tests/graft_env/envs/test_math_env.py::test_loads_a_real_benchmark"


def run_data_test(data_dir: Path, **env: str) -> subprocess.CompletedProcess:
    inherited = {k: v for k, v in os.environ.items() if k != "GRAFT_REQUIRE_DATA"}
    environment = {**inherited, "GRAFT_DATA_DIR": str(data_dir), **env}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", DATA_TEST],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_absent_data_skips_with_the_reason_or_fails_when_required(tmp_path: Path) -> None:
    (tmp_path / "math500").mkdir()  # a data directory without the files
    skipped = run_data_test(tmp_path)
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout
    assert f"benchmark data at {tmp_path} lacks math500/test.jsonl, aime24/test.jsonl" in (
        skipped.stdout
    )
    required = run_data_test(tmp_path, GRAFT_REQUIRE_DATA="1")
    assert required.returncode == 1 and "1 error" in required.stdout, required.stdout
    assert "GRAFT_REQUIRE_DATA=1: data tests must not skip" in required.stdout
