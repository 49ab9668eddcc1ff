"""A mistyped name (config key, option, choice, dataset, split, model) is one line that lists
what is valid and, when a valid name is close, says which was meant; a name close to nothing
gets no guess, and a hub id, a path or a name derived from a built-in one is never taken for a
typo."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from algorithms.training.run_config import ConfigError, check_env, config_from_dict
from graft_env.data import DatasetError, load
from graft_env.policies.zoo import check_model_name, load_policy, model_path
from graft_env.schema import Flag, OptionError, check_options

BASE = {"agents": [{"name": "a", "model": "tiny-a"}]}


@dataclass(frozen=True)
class Knobs:
    batch_size: Flag = field(default=True, metadata={"help": "a test option"})
    seed: Flag = field(default=True, metadata={"help": "another"})


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("env.batchsize=4", "env.batchsize: unknown key; valid: batch_size, data_dir, "),
        ("env.batchsize=4", "; did you mean 'batch_size'?"),
        ("stepz=3", "stepz: unknown key; valid: agents, "),
        ("stepz=3", "; did you mean 'steps'?"),
        ("algorithm_options.dleta=0.5", "algorithm_options.dleta: unknown option; valid: n, "),
        ("algorithm_options.dleta=0.5", "; did you mean 'delta'?"),
        ("sampling.top_k=5", "; did you mean 'top_p'?"),
        ("rollout_correction.mode=trunc", "'trunc' is not one of 'monitor', 'truncate', 'mask';"),
        ("rollout_correction.mode=trunc", "; did you mean 'truncate'?"),
        ("backend=rey", "backend: 'rey' is not one of 'local', 'ray'; did you mean 'ray'?"),
        ("algorithm_options.order=peer_lats", "did you mean 'peer_last' or 'peer_first'?"),
        ("env.dataset=math5000", "env.dataset: unknown dataset 'math5000'; valid: "),
        ("env.dataset=math5000", "; did you mean 'math500'"),  # whatever else is listed
        ("agents.0.options.lrr=1e-5", "agents.0.options.lrr: unknown option; valid: "),
        ("agents.0.options.lrr=1e-5", "; did you mean 'lr'?"),
        ("agents.0.model=tiny_a", "agents.0.model: model 'tiny_a' is neither a built-in model "),
        ("agents.0.model=smollm2-135", "existing path; did you mean 'smollm2-135m'?"),
        ("agents.0.model=TINY-A", "existing path; did you mean 'tiny-a' or 'tiny-b'?"),
        ("agents.0.model=smolm2-135m", "existing path; did you mean 'smollm2-135m'?"),
    ],
)
def test_a_mistyped_config_key_says_which_was_meant(override, message):
    with pytest.raises(ConfigError) as error:
        config_from_dict(BASE, [override])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_mistyped_dataset_option_says_which_was_meant():
    env = config_from_dict(BASE, ["env.dataset_options.sise=3"]).env
    with pytest.raises(ConfigError) as error:
        check_env(env)
    message = str(error.value)
    assert message.startswith("env.dataset_options.sise: unknown option; valid: ")
    assert message.endswith("; did you mean 'size' or 'skills'?") and "\n" not in message


def test_a_key_close_to_nothing_gets_no_guess():
    with pytest.raises(ConfigError, match=r"^zzzz: unknown key; valid: [a-z_, ]+$"):
        config_from_dict(BASE, ["zzzz=1"])
    with pytest.raises(ConfigError, match=r"^backend: 'zzzz' is not one of 'local', 'ray'$"):
        config_from_dict(BASE, ["backend=zzzz"])
    with pytest.raises(OptionError, match=r"^Knobs\.qqq: unknown option; valid: batch_size, seed$"):
        check_options(Knobs, {"qqq": True}, "Knobs")


def test_an_unknown_option_of_a_class_names_the_closest():
    with pytest.raises(OptionError) as error:
        check_options(Knobs, {"batch_sise": True}, "Knobs")
    assert str(error.value) == (
        "Knobs.batch_sise: unknown option; valid: batch_size, seed; did you mean 'batch_size'?"
    )
    assert error.value.key == "batch_sise"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: load("math5000"), "unknown dataset 'math5000'; available datasets: ["),
        (lambda: load("math5000"), "]; did you mean 'math500'?"),
        (lambda: load("math500", split="tset"), "valid splits: ['test']; did you mean 'test'?"),
        (lambda: load("procedural", sise=3), "got unknown option(s) ['sise']; valid options: "),
        (lambda: load("procedural", sise=3), "; did you mean 'size' or 'skills'?"),
    ],
)
def test_a_mistyped_dataset_name_split_or_option_says_which_was_meant(call, message):
    with pytest.raises(DatasetError) as error:
        call()
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("tiny-c", "'tiny-b' or 'tiny-a'"),
        ("tiny_a", "'tiny-a' or 'tiny-b'"),
        ("TINY-A", "'tiny-a' or 'tiny-b'"),
        ("smollm2-135", "'smollm2-135m'"),
        ("smolm2-135m", "'smollm2-135m'"),
        ("gemma-3-270m", "'gemma3-270m'"),
    ],
)
def test_a_mistyped_model_name_is_refused_before_anything_loads(tmp_path, name, meant):
    expected = f"model {name!r} is neither a built-in model name nor an existing path; did you "
    with pytest.raises(ValueError, match=f"^{expected}mean {meant}\\?$"):
        model_path(name, cache_dir=tmp_path)
    with pytest.raises(ValueError, match=f"^{expected}"):
        load_policy(name, cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing built or converted


LEGITIMATE_MODELS = [
    "google/gemma-3-270m",  # hub ids (docs/scale-out.md)
    "google/gemma-3-270m-it",
    "unsloth/gemma-3-270m",
    "Qwen/Qwen3-1.7B",
    "gpt2",
    "/models/smollm2-135m",  # paths that need not exist on the validating machine
    "out/gap-d30-a",
    "./tiny-a",
    "tiny-a-sft",  # local directories derived from a built-in name, made later
    "gap-d30-a-sft",
    "tiny-a2",  # characters added at a built-in name's end: derived, never a typo
    "tiny-as",
]


@pytest.mark.parametrize("model", LEGITIMATE_MODELS)
def test_hub_ids_paths_and_derived_names_validate(tmp_path, monkeypatch, model):
    monkeypatch.chdir(tmp_path)  # none of them exists here
    check_model_name(model)
    config = config_from_dict(BASE, [f"agents.0.model={model}"])
    assert config.agents[0].model == model


def test_built_in_names_and_existing_paths_are_not_typos(tmp_path, monkeypatch):
    for name in ("tiny-a", str(tmp_path)):
        check_model_name(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-c").mkdir()  # a local model directory that looks like a typo
    check_model_name("tiny-c")
    assert model_path("tiny-c", cache_dir=tmp_path) == Path("tiny-c")


def test_a_mistyped_rollout_backend_says_which_was_meant(tmp_path):
    with pytest.raises(ValueError, match=r"valid: \['transformers', 'vllm'\]; did you mean 'vllm'"):
        load_policy("tiny-a", cache_dir=tmp_path, rollout_backend="vlm")
