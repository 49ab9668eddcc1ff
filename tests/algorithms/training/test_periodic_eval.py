"""Evaluation during training writes eval/* metrics and keeps the best checkpoint."""

import json

import pytest
from run_configs import small_config

from algorithms.training.loop import Trainer
from algorithms.training.periodic_eval import eval_sets


def test_eval_rows_and_best_checkpoint(tmp_path, fresh_policies):
    config = small_config(
        tmp_path / "run",
        "grpo",
        agents=("tiny-b",),
        steps=2,
        eval={
            "every": 1,
            "datasets": ["procedural/subtraction", "procedural/gcd"],
            "k": 2,
            "limit": 4,
            "max_new_tokens": 48,
        },
    )
    rows = Trainer(config, policies=fresh_policies("tiny-b")).train()
    values = [row["eval/average/pass@1"] for row in rows]
    assert len(values) == 2 and all(0.0 <= v <= 1.0 for v in values)
    assert all("eval/procedural/gcd/pass@1" in row for row in rows)
    # the evaluation before the first update: in step 0's row only, never a best checkpoint
    start = [row for row in rows if "eval_start/average/pass@1" in row]
    assert [row["step"] for row in start] == [0] and start[0]["time/eval_start"] > 0
    assert 0.0 <= start[0]["eval_start/procedural/gcd/pass@1"] <= 1.0
    best = json.loads((tmp_path / "run" / "best" / "tiny-b" / "best.json").read_text())
    assert best["value"] == max(values)
    assert best["step"] == values.index(max(values))
    assert (tmp_path / "run" / "best" / "tiny-b" / "config.json").is_file()


def test_evaluating_changes_no_training_number(tmp_path, fresh_policies):
    """Evaluation samples with its own seeds: the run's rollouts and updates are those of a
    run without it, number for number (both sides run the same operations in one process)."""
    runs = []
    for every in (0, 1):
        evaluation = {"every": every, "datasets": ["procedural/gcd"], "k": 1, "limit": 2}
        config = small_config(tmp_path / f"run{every}", "grpo", agents=("tiny-b",), eval=evaluation)
        runs.append(Trainer(config, policies=fresh_policies("tiny-b")).train())
    for plain, evaluated in zip(*runs, strict=True):
        assert plain["reward_mean"] == evaluated["reward_mean"]
        assert plain["loss"] == evaluated["loss"]


def test_unknown_eval_sets_are_named():
    with pytest.raises(ValueError, match="unknown procedural skill 'division'"):
        eval_sets(["procedural/division"], None, 4)


def test_procedural_options_reach_the_eval_sets():
    sets = eval_sets(["procedural/gcd"], None, 6, {"difficulty": 2})
    assert len(sets["procedural/gcd"]) == 6
    assert {p.extra["difficulty"] for p in sets["procedural/gcd"]} == {2}
    assert all(p.id.startswith("procedural/test/gcd/") for p in sets["procedural/gcd"])


def test_distinct_keeps_the_first_occurrence_of_each_problem_text():
    # level-1 multiplication has a small question space: 200 test items repeat questions
    plain = eval_sets(["procedural/multiplication"], None, 200, {"difficulty": 1})
    kept = eval_sets(["procedural/multiplication"], None, 200, {"difficulty": 1}, distinct=True)
    texts = [p.problem for p in plain["procedural/multiplication"]]
    distinct = kept["procedural/multiplication"]
    assert len(distinct) == len(set(texts)) < len(texts)
    assert [p.problem for p in distinct] == list(dict.fromkeys(texts))
