"""Smoke test of `benchmarks.perf.worker_group_device_check` on CPU (gloo, world size 1, toy
Qwen3, one thread): every stage of the GPU script runs through the same code and the sharded
checkpoint comes back bitwise; with Ray installed through `RankWorker`, and without it
(`--direct`) through the functions its methods call."""

from __future__ import annotations

import json

import pytest

from benchmarks.perf import worker_group_device_check as check

STAGES = [
    "build",
    "setup",
    "warm_up",
    "update_peak",
    "update_paper",
    "score",
    "generate",
    "checkpoint",
]


def run(tmp_path, *extra: str) -> dict:
    out = tmp_path / "out"
    argv = ["--smoke", "--threads", "1", "--out", str(out), "--scratch", str(tmp_path), *extra]
    assert check.main(argv) == 0
    assert (out / "summary.txt").read_text().count("\n") >= len(STAGES) + 2
    return json.loads((out / "results.json").read_text())


def assert_complete(results: dict) -> None:
    assert "errors" not in results
    stages = results["stages"]
    assert list(stages) == STAGES
    assert stages["setup"] == {**stages["setup"], "backend": "gloo", "world_size": 1}
    for name in ("update_peak", "update_paper", "score", "generate"):
        assert stages[name]["plan_gib"] > 0 and stages[name]["peak_gib"] > 0, name
    size = check.SMOKE
    assert stages["update_peak"]["rows"] == size.peak_prompts * size.n
    assert stages["update_peak"]["padding_share"] == 0  # every row equally long
    assert stages["update_paper"]["rows"] == size.paper_prompts * size.n
    assert stages["update_paper"]["estimate_s"] > 0
    assert stages["score"] == {**stages["score"], "rows": size.peer_rows, "finite": True}
    assert stages["generate"]["sequences"] == size.generate_prompts * 2
    saved = stages["checkpoint"]
    assert saved["tensors_changed_by_the_update"] > 0  # the comparison can see a change
    assert saved["equal_after_load"] and saved["different_after_load"] == []


def test_the_smoke_size_runs_every_stage_through_the_rank_worker(tmp_path):
    pytest.importorskip("ray")
    results = run(tmp_path)
    assert results["settings"]["driver"] == "RankWorker"
    assert_complete(results)


def test_without_ray_the_same_stages_run_directly(tmp_path):
    results = run(tmp_path, "--direct")
    assert results["settings"]["driver"] == "DirectRank (no ray)"
    assert_complete(results)


def test_a_spent_time_budget_skips_the_remaining_stages(tmp_path):
    out = tmp_path / "out"
    argv = ["--smoke", "--threads", "1", "--out", str(out), "--time-budget-s", "0"]
    assert check.main([*argv, "--scratch", str(tmp_path)]) == 1
    results = json.loads((out / "results.json").read_text())
    assert results["skipped"] == ["build", "setup"]  # nothing runs without a policy
    assert "SKIPPED (time budget): build, setup" in (out / "summary.txt").read_text()


def test_a_mismatch_after_load_is_seen():
    """`differences` names the tensors that differ (the checkpoint check rests on it)."""
    import torch

    before = {"model": {"w": torch.zeros(2)}, "optimizer": {"step": 1}}
    after = {"model": {"w": torch.tensor([0.0, 1e-9])}, "optimizer": {"step": 1}}
    assert check.differences(before, after) == ["/model/w"]
    assert check.differences(before, before) == []
