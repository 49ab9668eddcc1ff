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
    best = json.loads((tmp_path / "run" / "best" / "tiny-b" / "best.json").read_text())
    assert best["value"] == max(values)
    assert best["step"] == values.index(max(values))
    assert (tmp_path / "run" / "best" / "tiny-b" / "config.json").is_file()


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
