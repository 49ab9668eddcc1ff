"""The algorithm registry: names, presets as option changes, and clear errors (GRAFT-SPEC §7)."""

from __future__ import annotations

import dataclasses

import pytest

import algorithms
from algorithms import AlgorithmConfig
from algorithms.exchange import available_strategies

REQUIRED = [
    "grpo", "grpo-dynamic", "graft", "graft-no-compat", "graft-no-floor", "graft-no-clip",
    "graft-naive", "graft-no-balance", "graft-seq-ratio", "graft-random-prompts",
    "graft-random-admission", "graft-peer-first", "graft-peer-random", "graft-pooled",
    "graft-success-only", "graft-success-only-no-floor", "graft-stored", "sgt", "luffy", "hacpo",
    "dr-grpo", "grpo-kl",
]  # fmt: skip

# Every entry as (base entry, the fields it changes, their values) - written out by hand from
# the SPEC table, independently of algorithms/presets.py.
VARIANTS = {
    "grpo-dynamic": ("grpo", {"dynamic_sampling": True}),
    "graft": ("grpo", {"exchange": "graft"}),
    "graft-no-compat": ("graft", {"compat": False}),
    "graft-no-floor": ("graft", {"delta": 0.0}),
    "graft-no-clip": ("graft", {"peer_clip": False}),
    "graft-naive": ("graft", {"compat": False, "peer_clip": False}),
    "graft-no-balance": ("graft", {"balance": False, "candidates": "any_success"}),
    "graft-seq-ratio": ("graft", {"ratio": "sequence"}),
    "graft-random-prompts": ("graft", {"selection": "random_prompts"}),
    "graft-random-admission": ("graft", {"admission": "random"}),
    "graft-peer-first": ("graft", {"order": "peer_first"}),
    "graft-peer-random": ("graft", {"order": "random"}),
    "graft-pooled": ("graft", {"pooled": True}),
    "graft-success-only": ("graft", {"success_only": True}),
    "graft-success-only-no-floor": ("graft", {"success_only": True, "delta": 0.0}),
    "graft-stored": ("graft", {"stored": True, "balance": False}),
    "luffy": ("graft", {"peer_objective": "luffy", "compat": False, "peer_clip": False}),
    "sgt": ("grpo", {"exchange": "sgt", "peer_objective": "nll"}),
    "dr-grpo": ("grpo", {"adv_scale": "none", "constant_norm": 4096}),
    "grpo-kl": ("grpo", {"kl_coef": 0.001}),
    "hacpo": (
        "grpo",
        {"exchange": "hacpo", "ratio": "sequence", "eps_low": 3e-4, "eps_high": 4e-4,
         "peer_eps_low": 0.2, "peer_eps_high": 0.0},
    ),
}  # fmt: skip


def changed_fields(config: AlgorithmConfig, base: AlgorithmConfig) -> dict[str, object]:
    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if getattr(config, f.name) != getattr(base, f.name)
    }


def test_every_required_entry_exists_constructs_and_validates() -> None:
    assert set(REQUIRED) <= set(algorithms.available())
    assert algorithms.available() == sorted(algorithms.available())
    for name in REQUIRED:
        algo = algorithms.make(name)  # make validates: an invalid preset would raise here
        assert algo.name == name
        assert algo.config == algorithms.preset(name)  # no override: exactly the preset
        assert algo.strategy.name == algo.config.exchange
        broken = dataclasses.replace(algo.config, n=1)
        with pytest.raises(ValueError, match=r"^AlgorithmConfig\.n: 1 must be >= 2$"):
            algorithms.Algorithm(name, broken)


def test_variants_differ_from_their_base_in_exactly_the_documented_fields() -> None:
    assert set(VARIANTS) | {"grpo"} == set(REQUIRED)
    for name, (base, changes) in VARIANTS.items():
        assert changed_fields(algorithms.preset(name), algorithms.preset(base)) == changes, name


def test_grpo_defaults_are_the_papers_baseline() -> None:
    config = algorithms.preset("grpo")
    assert (config.n, config.eps_low, config.eps_high, config.num_minibatches) == (8, 0.2, 0.28, 4)
    assert (config.exchange, config.delta, config.adv_eps) == ("none", 0.8, 1e-6)
    for n in (16, 32):
        assert algorithms.make("grpo", n=n).config == dataclasses.replace(config, n=n)


def test_every_entry_divides_by_the_sample_std() -> None:
    # The paper trained with verl, whose GRPO advantage divides by torch.std (ddof 1).
    assert {name: algorithms.preset(name).adv_ddof for name in algorithms.available()} == {
        name: 1 for name in algorithms.available()
    }


def test_describe_names_every_option_an_entry_changes_from_grpo() -> None:
    assert algorithms.make("grpo").describe() == {}
    for name in algorithms.available():
        described = algorithms.make(name).describe()
        changes = changed_fields(algorithms.preset(name), algorithms.preset("grpo"))
        assert set(described) == set(changes), name
        for field, text in described.items():
            help_text = AlgorithmConfig().describe()[field]
            assert text == f"{changes[field]!r}: {help_text}", (name, field)
    dr_grpo = algorithms.make("dr-grpo").describe()
    assert "Dr.GRPO" in dr_grpo["adv_scale"] and "Dr.GRPO" in dr_grpo["constant_norm"]
    assert "k3" in algorithms.make("grpo-kl").describe()["kl_coef"]
    assert algorithms.make("grpo-kl", kl_coef=0.01).describe()["kl_coef"].startswith("0.01: ")


def test_random_admission_says_its_count_is_matched_per_direction() -> None:
    # App. F: the floor's count "separately in each direction", the default admission_match.
    described = algorithms.make("graft-random-admission").describe()
    assert "per direction and step" in described["admission"]
    assert "admission_match" in described["admission"]


def test_every_field_is_documented_and_the_config_is_frozen() -> None:
    config = AlgorithmConfig()
    help_texts = config.describe()
    assert set(help_texts) == {f.name for f in dataclasses.fields(config)}
    assert all(len(text) > 10 for text in help_texts.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.n = 16  # type: ignore[misc]


def test_unknown_names_and_options_list_what_is_valid() -> None:
    with pytest.raises(
        ValueError,
        match=(
            r"unknown algorithm 'grpoo'; did you mean 'grpo' or 'grpo-kl'\?; "
            r"available: \[.*'graft'.*'grpo'"
        ),
    ):
        algorithms.make("grpoo")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['detla'\].*'delta'"):
        algorithms.make("graft", detla=0.5)
    with pytest.raises(
        ValueError, match=r"^AlgorithmConfig\.exchange: 'magic' is not one of .*'graft'"
    ):
        algorithms.make("graft", exchange="magic")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"n": 1}, r"n: 1 must be >= 2"),
        ({"n": "8"}, r"n: '8' is not an integer"),
        ({"n": True}, r"n: True is not an integer"),
        ({"balance": "yes"}, r"balance: 'yes' is not true or false"),
        ({"eps_low": 1.5}, r"eps_low: 1.5 must be < 1"),
        ({"eps_low": -0.1}, r"eps_low: -0.1 must be >= 0"),
        ({"delta": float("nan")}, r"delta: nan is not a finite number"),
        ({"eps_high": float("inf")}, r"eps_high: inf is not a finite number"),
        (
            {"order": "sideways"},
            r"order: 'sideways' is not one of 'peer_last', 'peer_first', 'random'",
        ),
        ({"ratio": "tokens"}, r"ratio: 'tokens' is not one of 'token', 'sequence'"),
        ({"adv_ddof": 8}, r"adv_ddof: 8 must be < n=8"),
        ({"peer_eps_high": -0.1}, r"peer_eps_high: -0.1 must be >= 0"),
        (
            {"exchange": "hacpo", "capability_ratio_max": 0.01},
            r"capability_ratio_max: 0.01 must be >= capability_ratio_min=0.1",
        ),
        ({"kl_coef": -0.1}, r"kl_coef: -0.1 must be >= 0"),
        ({"constant_norm": -1}, r"constant_norm: -1 must be >= 0"),
        ({"constant_norm": 64.0}, r"constant_norm: 64.0 is not an integer"),
    ],
)
def test_bad_values_name_the_field_and_what_it_accepts(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        algorithms.make("graft", **overrides)


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        (
            "sgt",
            {"peer_objective": "ppo"},
            r"peer_objective: 'ppo' must be 'nll' with exchange='sgt'",
        ),
        (
            "graft",
            {"peer_objective": "nll"},
            r"peer_objective: 'nll' must be 'ppo' or 'luffy' with",
        ),
        ("grpo", {"peer_objective": "nll"}, r"peer_objective: 'nll' .* with exchange='none'"),
        ("luffy", {"peer_clip": True}, r"peer_clip: True must be False with .*LUFFY"),
        ("luffy", {"ratio": "sequence"}, r"ratio: 'sequence' must be 'token' with peer_objective"),
        ("graft-stored", {"balance": True}, r"balance: True must be False with stored=True"),
        (
            "graft",
            {"dynamic_sampling": True},
            r"dynamic_sampling: True must be False with exchange=",
        ),
        (
            "hacpo",
            {"dynamic_sampling": True},
            r"dynamic_sampling: True must be False with exchange=",
        ),
        # GRAFT's options: 'graft' and any GRAFT variant a strategy module adds read them
        ("grpo", {"pooled": True}, r"pooled: True must be False unless exchange(=| is one of )'gr"),
        ("sgt", {"delta": 0.5}, r"delta: 0.5 must be 0.8 unless exchange(=| is one of )'graft'"),
        ("graft", {"sgt_coef": 0.5}, r"sgt_coef: 0.5 must be 0.1 unless exchange='sgt'"),
        (
            "grpo",
            {"capability_window": 3},
            r"capability_window: 3 must be 5 unless exchange='hacpo'",
        ),
        ("graft-no-compat", {"admission": "random"}, r"admission: 'random' must be 'compat' when"),
        (
            "graft",
            {"admission_match": "group"},
            r"admission_match: 'group' must be 'direction' unl",
        ),
        (
            "graft",
            {"candidates": "any_success"},
            r"candidates: 'any_success' must be 'informative'",
        ),
        ("graft-no-balance", {"pooled": True}, r"pooled: True must be False with candidates="),
    ],
)
def test_contradictory_options_are_rejected(name, overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        algorithms.make(name, **overrides)


def test_register_adds_a_preset_and_refuses_duplicates() -> None:
    @algorithms.register("test-grpo-n16-sequence")
    def grpo_n16_sequence() -> AlgorithmConfig:
        return dataclasses.replace(algorithms.preset("grpo"), n=16, ratio="sequence")

    assert "test-grpo-n16-sequence" in algorithms.available()
    assert algorithms.make("test-grpo-n16-sequence").config.n == 16
    with pytest.raises(ValueError, match="already registered"):
        algorithms.register("graft")(grpo_n16_sequence)
    assert {"none", "graft", "sgt", "hacpo"} <= set(available_strategies())
