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
    assert saved["rng_moved_before_load"]  # and the RNG moved between save and load
    assert saved["equal_after_load"] and saved["different_after_load"] == []
    assert "cuda_rng_equal_after_load" not in saved  # CPU: no CUDA generator
    assert set(results["settings"]["expected_s"]) == set(STAGES)


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


def test_a_load_that_leaves_the_rng_as_it_is_is_seen(tmp_path, monkeypatch):
    """The draws between save and load move the CPU generator, so a load that does not put
    it back fails the check (exit 1, /rng named); without the draws it would pass."""
    import torch

    real_load = check.DirectRank.load

    def load_keeping_rng(self, path: str) -> None:
        state = torch.get_rng_state()
        real_load(self, path)
        torch.set_rng_state(state)

    monkeypatch.setattr(check.DirectRank, "load", load_keeping_rng)
    out = tmp_path / "out"
    argv = ["--smoke", "--direct", "--threads", "1", "--out", str(out), "--scratch", str(tmp_path)]
    assert check.main(argv) == 1
    saved = json.loads((out / "results.json").read_text())["stages"]["checkpoint"]
    assert saved["different_after_load"] == ["/rng"] and not saved["equal_after_load"]


def test_a_stage_that_would_end_past_the_budget_is_skipped(tmp_path):
    """A stage starts only if the seconds spent plus its expected seconds fit the budget; the
    files are written before a stage runs, so a run killed inside it keeps the rest."""
    import argparse

    out = tmp_path / "out"
    args = argparse.Namespace(out=out, device="cpu", time_budget_s=60.0)
    results = {
        "environment": {"device": "cpu", "torch": "-", "transformers": "-"},
        "settings": {"model": "m", "parameters": 1, "driver": "d"},
        "stages": {},
    }
    stages = check.Stages(args, results, {"short": 1.0, "long": 120.0, "after": 1.0})

    def short() -> dict:
        written = json.loads((out / "results.json").read_text())["stages"]
        assert "running_since_s" in written["short"]  # on disk before the stage ran
        assert "short" in (out / "summary.txt").read_text()
        return {}

    assert "seconds" in stages.run("short", short)
    ran = []
    assert "skipped" in stages.run("long", lambda: ran.append(1) or {})
    assert "skipped" in stages.run("after", lambda: ran.append(1) or {})
    assert ran == [] and results["skipped"] == ["long", "after"]
    assert "SKIPPED (time budget): long, after" in (out / "summary.txt").read_text()


def test_the_options_are_the_paper_configs_qwen3_agent():
    """`options_for` takes the paper config's own agent options (weight decay, grad clip,
    betas, lr, precision), setting only the device, the sizes and the sampling backend."""
    from algorithms.training.run_config import load_config

    (agent,) = [a for a in load_config(check.PAPER_CONFIG).agents if a.name == "qwen3-1.7b"]
    options = check.options_for(check.SMOKE, "cpu")
    for key in ("lr", "betas", "weight_decay", "grad_clip", "dtype", "autocast",
                "gradient_checkpointing", "generation_batch_size", "score_batch_size"):  # fmt: skip
        assert options[key] == agent.options[key], key
    assert options["weight_decay"] == 0.01 and options["grad_clip"] == 1.0
    assert options["device"] == "cpu" and options["local_files_only"] is True
    assert options["max_tokens_per_micro_batch"] == check.SMOKE.budget
    assert options["logits_chunk_tokens"] == check.SMOKE.chunk
    assert not [k for k in options if k.startswith("vllm_") or k == "rollout_backend"]
