"""One typed schema for every option a user can write: algorithm options (AlgorithmConfig and
each strategy's), policy options (HFPolicyOptions, load_policy's own, vllm_<field>) and Ray
options are typed dataclass fields with help, listed by `graft config show`, and every
mistake is one line naming the full key."""

from __future__ import annotations

import ast
import dataclasses
import pickle
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from run_configs import small_config

import algorithms
import algorithms.config as config_module
from algorithms.config import AlgorithmConfig, merged_class, option_fields
from algorithms.exchange import base as exchange_base
from algorithms.exchange import register_strategy
from algorithms.exchange.none import NoExchange
from algorithms.training.ray.options import RayOptions
from algorithms.training.run_config import ConfigError, config_from_dict
from benchmarks import cli
from graft_env.policies.options import (
    HFPolicyOptions,
    LoaderOptions,
    VLLMEngineOptions,
    policy_option_classes,
)
from graft_env.policies.zoo import load_policy
from graft_env.schema import OptionError, PositiveFloat, require

BASE = {"agents": [{"name": "a", "model": "tiny-a"}, {"name": "b", "model": "tiny-b"}]}
SECTIONS = {
    "algorithm_options": lambda: [("", merged_class())],
    "agents.N.options": policy_option_classes,
    "ray": lambda: [("", RayOptions)],
}


def _shown(capsys) -> list[str]:
    assert cli.main(["config", "show", "--format", "lines"]) == 0
    return capsys.readouterr().out.splitlines()


def test_config_show_lists_every_option_with_its_type_default_and_help(capsys):
    lines = _shown(capsys)
    for section, classes in SECTIONS.items():
        for prefix, cls in classes():
            for spec in dataclasses.fields(cls):
                key = f"{section}.{prefix}{spec.name}"
                help_text = spec.metadata.get("help", "")
                assert len(help_text) > 10, f"{cls.__name__}.{spec.name} has no help"
                found = [line for line in lines if line.split()[0] == key]
                assert len(found) == 1, key
                assert "default " in found[0] and found[0].endswith(help_text), found[0]
    counted = [line for line in lines if line.startswith(tuple(f"{s}." for s in SECTIONS))]
    assert len(counted) >= 64, len(counted)


def test_a_typo_in_any_section_is_the_same_one_line_error(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(small_config(tmp_path / "run", "graft").to_dict()))
    for section in ("algorithm_options", "agents.1.options", "ray"):
        status = cli.main(["config", "validate", str(path), "--set", f"{section}.lr_typo=1"])
        err = capsys.readouterr().err
        assert status == 2 and err.count("\n") == 1, err
        form = rf"graft config: error: {re.escape(str(path))}: {re.escape(section)}\.lr_typo: "
        assert re.fullmatch(form + r"unknown option; valid: \w+(, \w+)+\n", err), err


@pytest.mark.parametrize(
    ("override", "python_error", "build"),
    [
        (
            "algorithm_options.kl_coef=-1",
            "AlgorithmConfig.kl_coef: ",
            lambda: algorithms.configure("graft", kl_coef=-1),
        ),
        ("agents.0.options.lr=-1", "HFPolicyOptions.lr: ", lambda: HFPolicyOptions(lr=-1)),
        (
            "agents.0.options.vllm_max_num_seqs=-1",
            "VLLMEngineOptions.max_num_seqs: ",
            lambda: VLLMEngineOptions(max_num_seqs=-1),
        ),
        (
            "ray.torch_threads=-1",
            "RayOptions.torch_threads: ",
            lambda: RayOptions(torch_threads=-1),
        ),
    ],
)
def test_python_and_config_name_the_same_problem(override, python_error, build):
    with pytest.raises(ConfigError) as from_config:
        config_from_dict(BASE, [override])
    key, _, problem = str(from_config.value).partition(": ")
    assert key == override.split("=")[0]
    with pytest.raises(OptionError) as from_python:
        build()
    assert str(from_python.value) == python_error + problem


def test_policy_loader_options_are_load_policy_s_own_keywords():
    import inspect

    keywords = {
        p.name: p.default
        for p in inspect.signature(load_policy).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    declared = {f.name: f.default for f in dataclasses.fields(LoaderOptions)}
    assert declared == keywords


# --- a strategy declares its own options next to its code ----------------------------------


@dataclass(frozen=True)
class EchoOptions:
    echo_weight: PositiveFloat = field(
        default=0.5, metadata={"help": "how much an echoed group counts (test strategy)"}
    )


@pytest.fixture
def echo_strategy(monkeypatch):
    """A strategy "test-echo" with one option of its own, registered for this test only."""
    for module, name in [
        (exchange_base, "_STRATEGIES"),
        (config_module, "_STRATEGY_OPTIONS"),
        (config_module, "_STRATEGY_CHECKS"),
    ]:
        monkeypatch.setattr(module, name, dict(getattr(module, name)))

    class EchoExchange(NoExchange):
        options = EchoOptions

        def check_options(self, where: str) -> None:
            super().check_options(where)
            if self.config.echo_weight > 1:
                raise require(where, "echo_weight", self.config.echo_weight, "<= 1 (an echo)")

    return register_strategy("test-echo")(EchoExchange)


def test_a_strategy_s_own_option_is_merged_validated_and_shown(echo_strategy, capsys):
    config = algorithms.configure("grpo", exchange="test-echo", echo_weight=0.25)
    assert config.echo_weight == 0.25 and isinstance(config, AlgorithmConfig)
    assert dataclasses.asdict(config)["echo_weight"] == 0.25
    assert "echo_weight" in {f.name for f in option_fields()}
    with pytest.raises(OptionError, match=r"^AlgorithmConfig\.echo_weight: 0 must be > 0$"):
        algorithms.configure("grpo", exchange="test-echo", echo_weight=0)
    with pytest.raises(OptionError, match=r"^AlgorithmConfig\.echo_weight: 2 must be <= 1"):
        algorithms.configure("grpo", exchange="test-echo", echo_weight=2)
    with pytest.raises(OptionError, match=r"echo_weight: 0.75 must be 0.5 unless exchange='test"):
        algorithms.configure("graft", echo_weight=0.75)
    with pytest.raises(ConfigError, match=r"^algorithm_options\.echo_weight: -1 must be > 0$"):
        config_from_dict(BASE, ["algorithm_options.echo_weight=-1", "algorithm=grpo"])
    show = [line for line in _shown(capsys) if line.startswith("algorithm_options.echo_weight ")]
    assert len(show) == 1 and show[0].endswith(
        EchoOptions.__dataclass_fields__["echo_weight"].metadata["help"]
    )


def test_an_option_is_declared_once_and_a_strategy_s_options_are_frozen_with_help(echo_strategy):
    @dataclass(frozen=True)
    class Clash:
        delta: float = field(default=0.1, metadata={"help": "a second delta"})

    class ClashExchange(NoExchange):
        options = Clash

    with pytest.raises(ValueError, match=r"option 'delta' is already declared by strategy 'graft'"):
        register_strategy("test-clash")(ClashExchange)

    @dataclass
    class Loose:
        loose: int = 1

    ClashExchange.options = Loose
    with pytest.raises(TypeError, match="must be a frozen dataclass"):
        register_strategy("test-loose")(ClashExchange)


def test_registering_for_one_test_leaves_the_shipped_options_alone():
    """The options are AlgorithmConfig's and those the shipped strategies (the modules of
    algorithms.exchange, a new one included) declare, each once; a test's own are gone."""
    names = [f.name for f in option_fields()]
    shipped = [
        cls
        for cls in exchange_base._STRATEGIES.values()
        if cls.__module__.startswith("algorithms.")
    ]
    declared = {f.name for f in dataclasses.fields(AlgorithmConfig)}
    declared |= {name for cls in shipped for name in cls.option_names()}
    assert "echo_weight" not in names and len(names) == len(set(names))
    assert set(names) == declared


def _compared_names(path: Path, names: set[str]) -> list[str]:
    """`line: expression` of each comparison of something with a strategy's name in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        constants = [
            c.value
            for o in operands
            for c in ([o] if isinstance(o, ast.Constant) else getattr(o, "elts", []))
            if isinstance(c, ast.Constant)
        ]
        if names & set(constants):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


# Comparisons with a name that is not a strategy's: a perf script's workload side (GRAFT vs
# GRPO timing), and the compare plots' registry entry `graft` (the paper's method, banded).
NOT_A_STRATEGY = {
    "benchmarks/perf/vs_trl.py": "args.child == 'graft'",
    "benchmarks/perf/trl_graft_step.py": "side == 'graft'",
    "benchmarks/commands/compare.py": "entry.name == 'graft'",
}


def test_no_check_names_a_strategy_by_string():
    """The strategies' rules live with them: no code in algorithms/ or benchmarks/ compares a
    value with a strategy's name (it asks the strategy, e.g. `moves_groups`); the presets name
    strategies, and `register_strategy(name)` is a call, not a comparison."""
    root = Path(__file__).resolve().parents[3]
    names = set(algorithms.exchange.available_strategies())
    assert names >= {"none", "graft", "sgt", "hacpo"}
    offenders = []
    for package in ("algorithms", "benchmarks"):
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative == "algorithms/presets.py":
                continue
            allowed = NOT_A_STRATEGY.get(relative)
            hits = _compared_names(path, names)
            offenders += [f"{relative}:{h}" for h in hits if not h.endswith(f": {allowed}")]
    assert not offenders, offenders


def test_a_pickled_config_loads_in_a_fresh_interpreter(tmp_path):
    """Unpickling imports what rebuilds the merged class (the registered strategies), so a
    config sent to another process (Ray, multiprocessing) loads there with nothing imported."""
    config = algorithms.configure("graft", delta=0.25)
    path = tmp_path / "config.pkl"
    path.write_bytes(pickle.dumps(config))
    load = f"import pickle, sys; c = pickle.load(open({str(path)!r}, 'rb')); print(repr(c))"
    done = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr(config)


# --- properties -------------------------------------------------------------------------------


def _valid_overrides() -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries(
        {},
        optional={
            "n": st.integers(2, 64),
            "delta": st.one_of(st.floats(0, 1, exclude_max=True), st.just(0)),
            "eps_high": st.one_of(st.floats(0, 10), st.integers(0, 3)),
            "kl_coef": st.floats(0, 1),
            "num_minibatches": st.integers(1, 8),
            "order": st.sampled_from(["peer_last", "peer_first", "random"]),
            "compat": st.booleans(),
        },
    )


@settings(max_examples=60, deadline=None)
@given(overrides=_valid_overrides())
def test_valid_overrides_are_kept_exactly_as_given(overrides):
    config = algorithms.configure("graft", **overrides)
    resolved = dataclasses.asdict(config)
    for key, value in overrides.items():
        assert resolved[key] == value and type(resolved[key]) is type(value), key
    assert pickle.loads(pickle.dumps(config)) == config == AlgorithmConfig(**resolved)


_WRONG = st.one_of(
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**6), 10**6),
    st.booleans(),
    st.none(),
)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_value_for_any_option_is_accepted_or_one_line_naming_it(data):
    cls = data.draw(
        st.sampled_from([HFPolicyOptions, VLLMEngineOptions, RayOptions, LoaderOptions])
    )
    spec = data.draw(st.sampled_from(dataclasses.fields(cls)))
    value = data.draw(_WRONG)
    try:
        built = cls(**{spec.name: value})
    except OptionError as error:
        message = str(error)
        assert message.startswith(f"{cls.__name__}.") and "\n" not in message, message
    else:
        assert getattr(built, spec.name) is value


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_algorithm_option_value_is_accepted_or_one_line_naming_it(data):
    spec = data.draw(st.sampled_from(option_fields()))
    value = data.draw(_WRONG)
    try:
        config = algorithms.configure("graft", **{spec.name: value})
    except OptionError as error:
        message = str(error)
        assert message.startswith("AlgorithmConfig.") and "\n" not in message, message
    else:
        assert getattr(config, spec.name) is value


def test_the_built_in_strategies_declare_their_options_in_their_own_modules():
    from algorithms.exchange.graft import GraftExchange
    from algorithms.exchange.hacpo import HacpoExchange
    from algorithms.exchange.sgt import SgtExchange

    shared = {f.name for f in dataclasses.fields(AlgorithmConfig)}
    for strategy in (GraftExchange, HacpoExchange, SgtExchange):
        assert strategy.options.__module__ == strategy.__module__
        own = {f.name for f in dataclasses.fields(strategy.options)}
        assert own and not own & shared and own <= {f.name for f in option_fields()}
    assert NoExchange.options is None
