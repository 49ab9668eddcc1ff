"""One set of evaluation defaults (GRAFT-SPEC §10), the same in every place that evaluates:
`graft eval`'s options, `evaluate`'s arguments, a run config's `eval:` (evaluation during
training) and a grid's `eval:` (graft compare)."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

from algorithms.training.eval_settings import EvalSettings
from algorithms.training.periodic_eval import EvalSpec
from benchmarks.commands import eval as eval_command
from benchmarks.compare.grid import EvalPlan
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
