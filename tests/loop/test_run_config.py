"""Run configs: YAML in, validated dataclasses out, clear errors naming the field."""

from pathlib import Path

import pytest

from algorithms.run_config import ConfigError, config_from_dict, load_config

REPO = Path(__file__).resolve().parents[2]
BASE = {"agents": [{"name": "a", "model": "tiny-a"}, {"name": "b", "model": "tiny-b"}]}


def test_shipped_configs_load_and_validate():
    paths = sorted((REPO / "configs").glob("*.yaml"))
    assert paths, "no configs shipped"
    for path in paths:
        config = load_config(path)
        assert config.agents and config.steps >= 1, path


def test_overrides_reach_nested_fields_and_parse_values():
    config = config_from_dict(
        BASE,
        [
            "env.batch_size=3",
            "agents.1.options.lr=1e-5",
            "algorithm_options.delta=0.5",
            "algorithm=graft-no-compat",
        ],
    )
    assert config.env.batch_size == 3
    assert config.agents[1].options == {"lr": 1e-5}
    assert config.algorithm_options == {"delta": 0.5}
    assert config.algorithm == "graft-no-compat"


def test_unknown_keys_are_named_with_the_valid_ones():
    with pytest.raises(ConfigError, match=r"env: unknown key\(s\) \['batchsize'\]; valid keys"):
        config_from_dict({**BASE, "env": {"batchsize": 4}})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['stepz'\]"):
        config_from_dict(BASE, ["stepz=3"])


def test_bad_values_name_the_field():
    with pytest.raises(ConfigError, match=r"env\.batch_size"):
        config_from_dict(BASE, ["env.batch_size=0"])
    with pytest.raises(ConfigError, match="names must be unique"):
        config_from_dict({"agents": [{"name": "a", "model": "x"}] * 2})
    with pytest.raises(ConfigError, match="not a valid list index"):
        config_from_dict(BASE, ["agents.5=3"])
    with pytest.raises(ConfigError, match="key=value"):
        config_from_dict(BASE, ["steps"])


def test_half_precision_weights_at_a_vanishing_lr_are_refused_before_loading():
    """bf16 weights at the default lr 1e-6 would not train (policies.precision): the config
    names the agent's options; mixed precision and a large enough lr pass."""
    with pytest.raises(ConfigError, match=r"agents\.1\.options: dtype='bfloat16' with lr=1e-06"):
        config_from_dict(BASE, ["agents.1.options.dtype=bfloat16"])
    config_from_dict(BASE, ["agents.1.options.dtype=bfloat16", "agents.1.options.lr=1e-4"])
    config_from_dict(BASE, ["agents.1.options.autocast=bfloat16"])
    with pytest.raises(ConfigError, match=r"agents\.0\.options\.lr must be a number"):
        config_from_dict(BASE, ["agents.0.options.dtype=float16", "agents.0.options.lr=fast"])


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_round_trip_through_plain_data():
    config = config_from_dict(BASE, ["steps=7"])
    assert config_from_dict(config.to_dict()) == config


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", "true"])
def test_threads_must_be_a_whole_number_of_at_least_one(value):
    with pytest.raises(ConfigError, match=r"^invalid value for threads: .* \(an integer >= 1"):
        config_from_dict(BASE, [f"threads={value}"])


def test_threads_are_unset_by_default_and_settable():
    assert config_from_dict(BASE).threads is None
    assert config_from_dict(BASE, ["threads=3"]).threads == 3
