"""Smoke test of benchmarks/perf/worker_group.py at its smallest size (one pair of runs,
2 steps of 2 prompts): minutes of rank start-up on two cores, so `slow`."""

from __future__ import annotations

import json

import pytest

from benchmarks.perf import worker_group


@pytest.mark.slow
def test_worker_group_benchmark_reports_both_sides(tmp_path):
    import ray

    out = tmp_path / "wg.json"
    try:
        worker_group.main(
            [
                "--pairs",
                "1",
                "--steps",
                "2",
                "--batch-size",
                "2",
                "--max-new-tokens",
                "16",
                "--json",
                str(out),
            ]
        )
    finally:
        ray.shutdown()
    summary = json.loads(out.read_text())
    assert summary["ratio_step"] > 0 and summary["ranks_2"][0]["step"] > 0
