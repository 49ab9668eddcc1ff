"""Smoke test of benchmarks/perf/worker_group.py at its smallest size (one pair of runs,
2 steps of 2 prompts, `--split`): minutes of rank start-up on two cores, so `slow`. The
split's parts must be non-negative and add up to each method's driver wall, and the
2-rank update must have spent time in collectives."""

from __future__ import annotations

import json
import math

import pytest

from algorithms.training.ray.call_timing import PARTS
from benchmarks.perf import worker_group

SUMMANDS = ("rank_collectives", "rank_compute", "rank_profiler", "driver_overhead")


@pytest.mark.slow
def test_worker_group_benchmark_reports_both_sides_and_the_split(tmp_path):
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
                "--split",
                "--json",
                str(out),
            ]
        )
    finally:
        ray.shutdown()
    summary = json.loads(out.read_text())
    assert summary["ratio_step"] > 0 and summary["ranks_2"][0]["step"] > 0
    assert summary["cores"] >= 1
    assert summary["rank_processes"] == {"ranks_1": 2, "ranks_2": 4}
    for ranks in ("ranks_1", "ranks_2"):
        table = summary["split"][ranks]
        assert {"generate", "update"} <= set(table), table
        for method, parts in table.items():
            assert all(parts[part] >= 0 for part in PARTS), (ranks, method, parts)
            # one step per run, one run: each median is of one value, so the parts add up
            added = sum(parts[part] for part in SUMMANDS)
            assert math.isclose(added, parts["driver_wall"], rel_tol=1e-6), (ranks, method)
        phases = summary[ranks][0]
        assert table["generate"]["driver_wall"] <= phases["rollout"] + 1e-6
        assert table["update"]["driver_wall"] <= phases["update"] + 1e-6
    assert summary["split"]["ranks_2"]["update"]["rank_collectives"] > 0
