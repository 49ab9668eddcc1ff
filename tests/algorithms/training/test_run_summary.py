"""The end-of-run summary says where the checkpoint is, how reward moved, and how to
evaluate the result."""

from __future__ import annotations

import re
import shlex

from hypothesis import given
from hypothesis import strategies as st
from run_configs import small_config

from algorithms.training.loop import Trainer
from algorithms.training.run_summary import run_summary


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
    assert "tiny-a: reward 0.500 (step 0); last step: all-fail share 0.000" in lines[1]
    assert lines[-1] == f"  checkpoints: none in {tmp_path / 'run' / 'checkpoints'}"


@given(steps=st.integers(2, 12), window=st.integers(1, 5))
def test_the_two_ends_of_the_reward_trend_never_share_a_step(steps, window):
    """A short run (3 steps, window 3) showed "0.302 (steps 0-2) -> 0.302 (steps 0-2)"."""
    config = small_config("run", "grpo", agents=("tiny-a",))
    rows = [
        {"agent": "tiny-a", "step": t, "reward_mean": t / 16, "all_fail_share": 0.0}
        for t in range(steps)
    ]
    line = run_summary(config, rows, threads=1, checkpoint=None, window=window)[1]
    match = re.search(r"reward ([\d.]+) \(steps? ([\d-]+)\) -> ([\d.]+) \(steps? ([\d-]+)\)", line)
    assert match, line
    ends = []
    for mean, span in ((match[1], match[2]), (match[3], match[4])):
        first, _, last = span.partition("-")
        covered = range(int(first), int(last or first) + 1)
        assert 1 <= len(covered) <= window
        assert mean == f"{sum(t / 16 for t in covered) / len(covered):.3f}"
        ends.append(covered)
    assert ends[0][0] == 0 and ends[1][-1] == steps - 1 and ends[0][-1] < ends[1][0]
