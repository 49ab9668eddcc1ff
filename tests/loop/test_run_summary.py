"""The end-of-run summary says where the checkpoint is, how reward moved, and how to
evaluate the result."""

from __future__ import annotations

import shlex

from run_configs import small_config

from algorithms.loop import Trainer
from algorithms.run_summary import run_summary


def test_the_summary_names_the_checkpoint_the_reward_trend_and_the_eval_command(
    tmp_path, fresh_policies
):
    config = small_config(tmp_path / "run", "grpo", agents=("tiny-a",), steps=4)
    trainer = Trainer(config, policies=fresh_policies("tiny-a"))
    rows = trainer.train()
    lines = run_summary(config, rows, threads=1, checkpoint=trainer.checkpoint, window=2)
    text = "\n".join(lines)
    rewards = [r["reward_mean"] for r in rows if r["agent"] == "tiny-a"]
    first, last = (rewards[0] + rewards[1]) / 2, (rewards[2] + rewards[3]) / 2
    assert f"tiny-a: reward {first:.3f} (steps 0-1) -> {last:.3f} (steps 2-3)" in text
    checkpoint = tmp_path / "run" / "checkpoints" / "step_000004"
    assert f"checkpoint: {checkpoint}" in text
    command = next(line for line in lines if "evaluate tiny-a: " in line).split(": ", 1)[1]
    assert shlex.split(command) == [
        "graft",
        "eval",
        "--model",
        str(checkpoint / "tiny-a"),
        "--max-new-tokens",
        "64",
    ]
    assert (checkpoint / "tiny-a" / "config.json").is_file()


def test_a_run_without_checkpoints_says_so(tmp_path):
    config = small_config(tmp_path / "run", "grpo", agents=("tiny-a",))
    rows = [{"agent": "tiny-a", "step": 0, "reward_mean": 0.5, "all_fail_share": 0.0}]
    lines = run_summary(config, rows, threads=2, checkpoint=None)
    assert lines[0] == f"grpo: 2 steps in {tmp_path / 'run'} (threads: 2)"
    assert "tiny-a: reward 0.500 (steps 0) -> 0.500 (steps 0)" in lines[1]
    assert lines[-1] == f"  checkpoints: none in {tmp_path / 'run' / 'checkpoints'}"
