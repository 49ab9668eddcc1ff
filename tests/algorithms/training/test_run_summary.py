"""The end-of-run summary says where the checkpoint is, how reward moved, and how to
evaluate the result."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from run_configs import small_config

from algorithms.training.loop import Trainer
from algorithms.training.run_summary import eval_command, run_summary
from graft_env.data.procedural import SKILLS


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
    # the run trains on procedural level-1 items: the hint evaluates their held-out test split
    sets = ",".join(f"procedural/{skill}" for skill in SKILLS)
    assert shlex.split(command) == [
        "graft",
        "eval",
        "--model",
        str(checkpoint / "tiny-a"),
        "--datasets",
        sets,
        "--procedural",
        "difficulty=1",
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


EVAL = {
    "every": 2,
    "datasets": ["procedural/gcd", "procedural/addition"],
    "procedural": {"difficulty": 1, "families": ["carry"]},
    "limit": 8,
    "k": 2,
    "max_new_tokens": 96,
}


def test_the_hint_evaluates_the_periodic_evaluations_sets_else_the_math_benchmarks():
    config = small_config("run", "grpo", agents=("tiny-a",), eval=EVAL)
    assert eval_command(config, Path("ckpt/tiny-a"))[4:] == [
        "--datasets",
        "procedural/gcd,procedural/addition",
        "--procedural",
        "difficulty=1",
        "--procedural",
        'families=["carry"]',
        "--max-new-tokens",
        "96",
    ]
    math = small_config("run", "grpo", agents=("tiny-a",), env={"dataset": "gsm8k"})
    assert eval_command(math, Path("m")) == [
        "graft",
        "eval",
        "--model",
        "m",
        "--max-new-tokens",
        "64",
    ]


def test_the_summary_gives_held_out_pass_before_and_after_training_and_its_time():
    config = small_config("run", "grpo", agents=("tiny-a", "tiny-b"), steps=4, eval=EVAL)
    rows = []
    for step in range(4):
        for agent in ("tiny-a", "tiny-b"):
            row = {"agent": agent, "step": step, "reward_mean": 0.5, "all_fail_share": 0.0}
            if step == 0:
                row |= {"eval_start/average/pass@1": 0.25, "time/eval_start": 3.0}
            if step % 2 == 1:
                row |= {"eval/average/pass@1": 0.25 + step / 8, "time/eval": 2.0}
            rows.append(row)
    lines = run_summary(config, rows, threads=1, checkpoint=None)
    trend = "0.250 (0) -> 0.375 (2) -> 0.625 (4)"
    assert f"  tiny-a: held-out average/pass@1 (after N updates) {trend}" in lines
    assert f"  tiny-b: held-out average/pass@1 (after N updates) {trend}" in lines
    # three evaluations of both agents: 3 s + 2 s + 2 s, counted once per step
    held_out = "procedural/gcd, procedural/addition (the first 8 problems each, k = 2)"
    assert f"  held-out sets: {held_out}; evaluation time 7s" in lines
    distinct = small_config("run", "grpo", steps=4, eval={**EVAL, "distinct": True})
    text = "\n".join(run_summary(distinct, rows, threads=1, checkpoint=None))
    assert "(the distinct of the first 8 problems each, k = 2)" in text
