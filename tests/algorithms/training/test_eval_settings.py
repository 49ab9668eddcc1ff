"""One set of evaluation defaults (GRAFT-SPEC §10), the same in every place that evaluates:
`graft eval`'s options, `evaluate`'s arguments, a run config's `eval:` (evaluation during
training) and a grid's `eval:` (graft compare)."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

import pytest
from run_configs import small_config

from algorithms.training.eval_settings import EvalSettings
from algorithms.training.periodic_eval import EvalSpec, eval_sets
from algorithms.training.run_config import ConfigError, config_from_dict
from algorithms.training.run_config.changes import result_differences
from benchmarks.commands import eval as eval_command
from benchmarks.compare.grid import EvalPlan
from graft_env.data import DatasetError
from graft_env.eval.evaluate import evaluate

SPEC_10 = {"k": 8, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 4096, "seed": 0}


def graft_eval_defaults() -> dict:
    commands = argparse.ArgumentParser().add_subparsers()
    eval_command.add_parser(commands)
    return vars(commands.choices["eval"].parse_args(["--model", "tiny-a"]))


def test_every_evaluation_samples_by_the_spec_unless_told_otherwise():
    settings = [field.name for field in dataclasses.fields(EvalSettings)]
    plan = EvalPlan(sets=("math500",))
    cli = graft_eval_defaults()
    arguments = {name: p.default for name, p in inspect.signature(evaluate).parameters.items()}
    for name, value in SPEC_10.items():
        assert getattr(EvalSpec(), name) == value, name  # run config's eval: (was 512 tokens)
        assert getattr(plan, name) == value, name  # grid's eval: (was 512 tokens)
        assert cli[name] == value, name
        assert arguments[name] == value, name
    for name in ("repeats", "batch_size"):
        assert cli[name] == arguments[name] == getattr(plan, name), name
    # the shared fields are defined once: both sections take them from EvalSettings
    for section in (EvalSpec, EvalPlan):
        fields = {field.name: field for field in dataclasses.fields(section)}
        for name in settings:
            assert fields[name].metadata["help"], (section.__name__, name)
            assert fields[name] == EvalSettings.__dataclass_fields__[name], name


def test_the_source_is_shared_and_counts_for_a_run_only_when_named(tmp_path):
    """`source` (where benchmark sets are read) defaults to auto everywhere; left there it
    changes no recorded run's resume check or cell hash (those runs read the files, as auto
    does where they are), while files or hub, named, count."""
    assert graft_eval_defaults()["source"] == EvalSpec().source == "auto"
    assert EvalPlan(sets=("math500",)).source == "auto"
    config = small_config(tmp_path / "run", "graft").to_dict()
    config["eval"] = {**config["eval"], "every": 2, "datasets": ["procedural/addition"]}
    assert config["eval"]["source"] == "auto"
    recorded = {**config, "eval": {k: v for k, v in config["eval"].items() if k != "source"}}
    assert result_differences(recorded, config) == []
    named = {**config, "eval": {**config["eval"], "source": "hub"}}
    assert result_differences(recorded, named) == ["eval.source: (unset) -> 'hub'"]
    with pytest.raises(ConfigError, match=r"eval\.source"):
        config_from_dict(config, ["eval.source=web"])


def test_eval_sets_read_benchmarks_from_the_source_given(tmp_path):
    (tmp_path / "aime24").mkdir()
    row = '{"id": 7, "problem": "Find x.", "answer": "3"}\n'
    (tmp_path / "aime24" / "test.jsonl").write_text(row)
    sets = eval_sets(["aime24", "procedural/addition"], tmp_path, 2, source="files")
    assert [p.id for p in sets["aime24"]] == ["aime24/test/7"]
    assert len(sets["procedural/addition"]) == 2
    with pytest.raises(DatasetError, match=r"math500/test\.jsonl' not found"):
        eval_sets(["math500"], tmp_path, 2, source="files")
