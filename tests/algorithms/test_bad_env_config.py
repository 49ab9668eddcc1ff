"""A prompt stream that cannot load (`env.split`, `env.dataset_options`, data files) is a
one-line error of `graft train` and `graft config validate` before any model loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from run_configs import small_config

from benchmarks import cli


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any model load fails the test: the env must be checked first."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model loaded before the env was checked")

    import algorithms.training.loop
    import graft_env.policies

    monkeypatch.setattr(algorithms.training.loop, "load_policy", refuse)
    monkeypatch.setattr(graft_env.policies, "load_policy", refuse)


BAD_ENVS = [
    (
        ["env.split=trian"],
        "env: dataset 'procedural' has no split 'trian'; valid splits: ['sft', 'train', 'test']",
    ),
    (
        ["env.dataset_options.dificulty=1"],
        "env.dataset_options.dificulty: unknown option; valid: skills, size, seed, difficulty, "
        "families",
    ),
    (
        ["env.dataset_options.difficulty=7"],
        "env.dataset_options.difficulty: difficulty must be a level in [1, 2, 3, 4, 5], "
        "a non-empty list of them, or None for the graded mix; got 7",
    ),
    (
        ["env.dataset_options.skills=[additon]"],
        "env.dataset_options.skills: unknown procedural skill 'additon'; valid skills: ",
    ),
    (
        ["env.dataset_options.size=-1"],
        "env.dataset_options.size: size must be a positive integer (items per skill), got -1",
    ),
    (
        ["env.dataset_options.families=[carry, nope]"],
        "env.dataset_options.families: unknown item family 'nope'; valid families: ",
    ),
    (
        ["eval.procedural.level=1"],
        "eval.procedural.level: unknown key; valid: difficulty, families, seed",
    ),
    (
        ["env.dataset=gsm8k", "env.split=validation", "env.dataset_options={}"],
        "env: dataset 'gsm8k' has no split 'validation'; valid splits: ['train', 'test']",
    ),
    (
        ["env.dataset=gsm8k", "env.dataset_options={}", "env.data_dir=/nowhere"],
        "env: data directory '/nowhere' (from data_dir) does not exist",
    ),
]


def _config_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(small_config(tmp_path / "run", "graft").to_dict()))
    return path


@pytest.mark.parametrize(("overrides", "message"), BAD_ENVS)
@pytest.mark.parametrize("command", [["train", "--config"], ["config", "validate"]])
def test_a_bad_prompt_stream_is_one_line_before_any_model_loads(
    command, overrides, message, tmp_path, capsys, no_model_loads
):
    config = _config_file(tmp_path)
    sets = [word for o in overrides for word in ("--set", o)]
    assert cli.main([*command, str(config), *sets]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"graft {command[0]}: error: {config}: {message}"), err
    assert not (tmp_path / "run").exists()


def test_a_good_prompt_stream_still_validates(tmp_path, capsys, no_model_loads):
    config = _config_file(tmp_path)
    assert cli.main(["config", "validate", str(config), "--set", "env.split=test"]) == 0
    assert "valid (graft" in capsys.readouterr().out
