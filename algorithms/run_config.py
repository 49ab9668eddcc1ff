"""Configuration of one training run: YAML in, frozen validated dataclasses out.

A run is fully determined by its `TrainConfig` and seed: which agents (models)
train, on which prompt stream, with which algorithm and sampling settings. The
same dataclasses are built from a YAML file (`load_config`) or from Python, and
`--set key=value` overrides address nested fields with dots (`env.batch_size=16`,
`agents.0.options.lr=1e-5`, `algorithm_options.delta=0.5`).

The dataclasses are the schema: each field's type (with its range, `Positive`, `Share`, ...)
and help text are written once, on the field. pydantic checks data against them, so every
error is one line naming the full key (`env.batch_size: 'abc' is not an integer`,
`agents.0.options.lrr: unknown option; valid: ...`), and `schema_lines` prints them
(`graft config show`). Validation keeps every value equal to what YAML gave (an int temperature
becomes an equal float): a run directory compares its saved config with the new one on resume.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import json
import os
import re
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BeforeValidator, ConfigDict, Field, Strict, TypeAdapter, ValidationError

from algorithms.periodic_eval import EvalSpec
from algorithms.wandb_sink import WandbSpec


class _Loader(yaml.SafeLoader):
    """YAML loader that reads `1e-6` as a float (YAML 1.2), as every user expects.

    PyYAML follows YAML 1.1, where a float needs a dot (`1.0e-6`); the paper's
    learning rate written `1e-6` would otherwise arrive as a string.
    """


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def parse_yaml(text: str, where: str = "") -> Any:
    """Parse YAML text with `_Loader`; a syntax error is a one-line `ConfigError` naming
    `where` (a file name, or `--set key`), the line and column, and what was found."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        at = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark and "\n" in text else where
        problem = " ".join(str(part) for part in (error.context, error.problem) if part)
        if "'\\t'" in problem:  # PyYAML names the character by its repr
            problem += " (YAML indents with spaces, not tabs)"
        raise ConfigError(f"{at or 'yaml'}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{where or 'yaml'}: YAML error: {error}") from None


T = TypeVar("T")


class ConfigError(ValueError):
    """A run configuration is invalid; the message names the field."""


def _fspath(value: Any) -> Any:
    """A path given as a `Path` from Python, as the string YAML would give."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


# The field types of the schema: pydantic checks them (`_ADAPTER`), `schema_lines` prints them.
# Numbers are strict (no "8" for 8, no 8.5 or true for an int); an int is a valid float.
Count = Annotated[int, Strict(), Field(ge=0)]
Positive = Annotated[int, Strict(), Field(ge=1)]
PositiveFloat = Annotated[float, Strict(), Field(gt=0)]
Share = Annotated[float, Strict(), Field(gt=0, le=1)]
Flag = Annotated[bool, Strict()]
Text = Annotated[str, Strict()]
PathText = Annotated[str, BeforeValidator(_fspath), Strict()]
Backend = Literal["local", "ray"]


@dataclass(frozen=True)
class AgentSpec:
    """One policy of the run."""

    name: Text = field(metadata={"help": "unique; names the agent's metrics and checkpoints"})
    model: Text = field(metadata={"help": "registry name (tiny-a, tiny-b, ...) or HF path/id"})
    options: Mapping[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "policy options: HFPolicyOptions fields (lr, dtype, device, ...), "
            "load_policy's rollout_backend, cache_dir, tiny_seed, and vllm_<field>"
        },
    )


@dataclass(frozen=True)
class EnvSpec:
    """The shared prompt stream."""

    dataset: Text = field(default="procedural", metadata={"help": "registry name (graft data)"})
    split: Text | None = field(default="train", metadata={"help": "null: the dataset's default"})
    data_dir: PathText | None = field(
        default=None, metadata={"help": "benchmark files (null: graft_env.data.resolve_data_dir)"}
    )
    dataset_options: Mapping[str, Any] = field(
        default_factory=dict, metadata={"help": "loader options, e.g. {size: 500, difficulty: 1}"}
    )
    batch_size: Positive = field(default=8, metadata={"help": "prompts per step (paper: 128)"})


@dataclass(frozen=True)
class SamplingSpec:
    """Rollout sampling (paper: temperature 1.0, top-p 1.0)."""

    temperature: PositiveFloat = field(default=1.0, metadata={"help": "rollout temperature"})
    top_p: Share = field(default=1.0, metadata={"help": "nucleus sampling mass"})
    max_new_tokens: Positive = field(default=128, metadata={"help": "response length cap"})


@dataclass(frozen=True)
class StoredPeerSpec:
    """Where `graft-stored` reads its partner's trajectories (GRAFT-SPEC §9)."""

    run_dir: PathText = field(metadata={"help": "the partner's run directory"})
    agent: Text = field(metadata={"help": "the partner's agent name in that run"})


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs; every field can be set from YAML or `--set`."""

    # pydantic's setting (not a field): an unknown key here or in any section is an error.
    __pydantic_config__ = ConfigDict(extra="forbid")

    agents: tuple[AgentSpec, ...] = field(metadata={"help": "the policies, at least one"})
    algorithm: Text = field(default="graft", metadata={"help": "registry name (algorithms.make)"})
    algorithm_options: Mapping[str, Any] = field(
        default_factory=dict, metadata={"help": "AlgorithmConfig overrides, e.g. {n: 8}"}
    )
    env: EnvSpec = field(default_factory=EnvSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    steps: Positive = field(default=10, metadata={"help": "training steps (a resumed run's total)"})
    seed: Count = field(default=0, metadata={"help": "seeds the prompt stream and sampling"})
    run_dir: PathText = field(
        default="runs/default", metadata={"help": "checkpoints, metrics and trajectories"}
    )
    checkpoint_every: Positive = field(default=5, metadata={"help": "steps between checkpoints"})
    keep_checkpoints: Positive = field(default=2, metadata={"help": "newest checkpoints kept"})
    store_trajectories: Flag = field(
        default=True, metadata={"help": "write rollouts to the store (graft-stored reads them)"}
    )
    stored_peer: StoredPeerSpec | None = field(
        default=None, metadata={"help": "graft-stored's partner run (null: none)"}
    )
    eval: EvalSpec = field(default_factory=EvalSpec)
    dynamic_max_rounds: Count = field(
        default=3, metadata={"help": "dynamic sampling: extra prompt batches drawn per step"}
    )
    tensorboard: Flag = field(default=True, metadata={"help": "TensorBoard logs in run_dir"})
    wandb: WandbSpec | None = field(
        default=None, metadata={"help": "wandb project/mode/...; absent: no wandb"}
    )
    progress: Flag = field(
        default=True, metadata={"help": "a progress bar (no terminal: one line per step)"}
    )
    backend: Backend = field(
        default="local",
        metadata={"help": "'local': policies in this process; 'ray': one Ray actor per agent"},
    )
    ray: Mapping[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Ray backend options (address, per-agent resources); see docs"},
    )
    threads: Positive | None = field(
        default=None,
        metadata={
            "help": "torch CPU threads of `graft train` (null: $OMP_NUM_THREADS if set, else 1). "
            "One thread never oversubscribes cores that other processes share, and reruns are "
            "bit-identical whatever the machine's load; more threads are faster only on cores "
            "nobody else uses, and change results in the last bits (graft_env.threads). "
            "`graft compare` runs its cells with the grid's `threads`"
        },
    )

    def validate(self) -> TrainConfig:
        """Check every field (types, ranges, names) as `config_from_dict` does; a config
        built in Python gets the same errors as one read from YAML."""
        _check(_validated(self.to_dict()))
        return self

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))


@functools.cache
def _adapter(cls: type) -> TypeAdapter:
    """The validator of schema dataclass `cls`, built on first use (a few ms)."""
    return TypeAdapter(cls)


def validate_as(
    cls: type[T], data: Any, error: type[ValueError] = ConfigError, where: str = ""
) -> T:
    """`data` (found at key `where`) as schema dataclass `cls`, every type and range checked;
    raises `error` with one `key.path: what is wrong` part per mistake, on one line."""
    try:
        return _adapter(cls).validate_python(data)
    except ValidationError as invalid:
        prefix = tuple(where.split(".")) if where else ()
        parts = [
            describe_error({**e, "loc": (*prefix, *e["loc"])}, _valid_keys(cls, e["loc"]))
            for e in invalid.errors()
            if not _after_item_errors(e)
        ]
        raise error("; ".join(parts)) from None


def _validated(data: Any) -> TrainConfig:
    return validate_as(TrainConfig, data)


def _check(config: TrainConfig) -> None:
    """What types cannot say: agent names, policy options, the dataset and algorithm names."""
    if not config.agents:
        raise ConfigError("agents: at least one agent is required")
    names = [a.name for a in config.agents]
    if len(set(names)) != len(names):
        raise ConfigError(f"agents: names must be unique, got {names}")
    if config.stored_peer is not None and config.stored_peer.agent in names:
        raise ConfigError(
            f"stored_peer.agent: {config.stored_peer.agent!r} clashes with a live agent name"
        )
    for key, (value, minimum) in {
        "eval.every": (config.eval.every, 0),
        "eval.k": (config.eval.k, 1),
        "eval.max_new_tokens": (config.eval.max_new_tokens, 1),
    }.items():
        if value < minimum:
            raise ConfigError(f"{key}: {value!r} must be >= {minimum}")
    from graft_env.data import available

    if config.env.dataset not in available():
        raise ConfigError(
            f"env.dataset: unknown dataset {config.env.dataset!r}; valid: {', '.join(available())}"
        )
    for index, agent in enumerate(config.agents):
        check_policy_options(agent.options, f"agents.{index}.options")
    _check_algorithm(config.algorithm, config.algorithm_options)


def _check_algorithm(name: str, options: Mapping[str, Any]) -> None:
    """The algorithm and its options through `algorithms.make` (AlgorithmConfig.validate)."""
    import algorithms

    if name not in algorithms.available():
        raise ConfigError(
            f"algorithm: unknown algorithm {name!r}; valid: {', '.join(algorithms.available())}"
        )
    try:
        algorithms.make(name, **options)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"algorithm_options: {error}") from None


def check_policy_options(options: Mapping[str, Any], where: str) -> None:
    """An agent's `options` checked as `load_policy` would take them, before any model loads:
    known names, `HFPolicyOptions` / `VLLMEngineOptions` types and checks, AdamW's ranges, and
    half-precision weights at a learning rate whose steps round away (`policies.precision`)."""
    from graft_env.policies.hf_options import HFPolicyOptions
    from graft_env.policies.precision import HALF_PRECISION_DTYPES, half_precision_training_error
    from graft_env.policies.vllm_policy import OPTION_PREFIX, VLLMEngineOptions
    from graft_env.policies.zoo import load_policy

    loader = [
        p.name
        for p in inspect.signature(load_policy).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    policy = [f.name for f in dataclasses.fields(HFPolicyOptions)]
    engine = [OPTION_PREFIX + f.name for f in dataclasses.fields(VLLMEngineOptions)]
    for key in options:
        if key not in loader + policy + engine:
            raise ConfigError(
                f"{where}.{key}: unknown option; valid: {', '.join(policy + loader + engine)}"
            )
    policy_values = {k: v for k, v in options.items() if k in policy}
    engine_values = {k.removeprefix(OPTION_PREFIX): v for k, v in options.items() if k in engine}
    checked = _check_fields(HFPolicyOptions, policy_values, where, "")
    _check_fields(VLLMEngineOptions, engine_values, where, OPTION_PREFIX)
    for key in ("lr", "weight_decay"):  # torch.optim.AdamW's own checks, after the model loads
        if getattr(checked, key) < 0:
            raise ConfigError(f"{where}.{key}: {options[key]!r} must be >= 0")
    error = half_precision_training_error(checked.dtype, checked.lr)
    if checked.dtype in HALF_PRECISION_DTYPES and error:
        raise ConfigError(f"{where}: {error}")


def _check_fields(cls: type, values: Mapping[str, Any], where: str, prefix: str) -> Any:
    """`values` as fields of dataclass `cls` (the instance): types and its own checks."""
    try:
        return _adapter(cls).validate_python(values)
    except ValidationError as error:
        first = error.errors()[0]
        loc = (prefix + str(first["loc"][0]),) if first["loc"] else ()
        raise ConfigError(describe_error({**first, "loc": (*where.split("."), *loc)})) from None


def _after_item_errors(error: Mapping[str, Any]) -> bool:
    """pydantic's "too short after validation" for a list whose items failed: those items'
    own errors say what is wrong."""
    value, ctx = error.get("input"), error.get("ctx") or {}
    given = len(value) if isinstance(value, list | tuple) else None
    return error["type"] == "too_short" and given is not None and given >= ctx["min_length"]


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
}


def describe_error(error: Mapping[str, Any], valid_keys: Sequence[str] = ()) -> str:
    """One pydantic error as `key.path: what is wrong` (`env.batch_size: 'abc' is not an
    integer`, `seed: -1 must be >= 0`, `env.batchsize: unknown key; valid: ...`)."""
    where = ".".join(str(part) for part in error["loc"]) or "config"
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    base = kind.split("_")[0]
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        return f"{where}: unknown key; valid: {', '.join(valid_keys)}"
    if kind in ("missing", "missing_argument", "missing_keyword_argument"):
        return f"{where}: missing (required)"
    if base in _TYPE_WORDS and kind.endswith(("_type", "_parsing", "_from_float")):
        return f"{where}: {value!r} is not {_TYPE_WORDS[base]}"
    bounds = {"greater": ">", "less": "<"}
    if base in bounds:
        op = bounds[base] + ("=" if kind.endswith("_equal") else "")
        limit = next(iter(ctx.values()))
        return f"{where}: {value!r} must be {op} {limit:g}"
    if kind == "literal_error":
        return f"{where}: {value!r} is not one of {ctx['expected'].replace(' or ', ', ')}"
    if kind in ("dataclass_type", "dict_type", "mapping_type", "model_type"):
        return f"{where}: expected a mapping, got {type(value).__name__}"
    if kind in ("too_short", "too_long"):
        size = len(value) if isinstance(value, list | tuple) else "?"
        wanted = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        word = "at least" if kind == "too_short" else "at most"
        return f"{where}: expected {word} {wanted} item(s), got {size}: {value!r}"
    if kind in ("tuple_type", "list_type"):
        return f"{where}: expected a list, got {type(value).__name__}"
    if kind == "value_error":
        return f"{where}: {ctx['error']}"
    return f"{where}: {error['msg']} (got {value!r})"


def _valid_keys(cls: type, loc: Sequence[Any]) -> list[str]:
    """The field names of the dataclass that holds the key at `loc` (for unknown-key errors)."""
    node: Any = cls
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        hints = typing.get_type_hints(node)
        node = _dataclass_in(hints.get(part))
        if node is None:
            return []
    return sorted(f.name for f in dataclasses.fields(node))


def _dataclass_in(hint: Any) -> type | None:
    """The dataclass inside a field type (`X`, `X | None`, `tuple[X, ...]`), or None."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) is Annotated:
        return _dataclass_in(typing.get_args(hint)[0])
    for arg in typing.get_args(hint):
        found = _dataclass_in(arg)
        if found is not None:
            return found
    return None


def schema_lines(cls: type = TrainConfig, prefix: str = "") -> list[str]:
    """The run-config schema, one `key  type  default  help` line per field (nested fields
    dotted, `agents.N.<field>` for list items): what `graft config show` prints."""
    lines = []
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        nested = _dataclass_in(hint)
        if nested is not None and typing.get_origin(_unannotated(hint)) is tuple:
            lines += schema_lines(nested, f"{prefix}{f.name}.N.")
            continue
        if nested is not None and f.default is dataclasses.MISSING:
            lines += schema_lines(nested, f"{prefix}{f.name}.")
            continue
        if f.default is not dataclasses.MISSING:
            default = f"default {json.dumps(_plain(f.default))}"
        elif f.default_factory is not dataclasses.MISSING:
            default = f"default {json.dumps(_plain(f.default_factory()))}"
        else:
            default = "required"
        help_text = f.metadata.get("help", "")
        lines.append(f"{prefix}{f.name}  {_type_name(hint)}  {default}  {help_text}".rstrip())
        if nested is not None:  # an optional section: its fields too
            lines += schema_lines(nested, f"{prefix}{f.name}.")
    return lines


def _unannotated(hint: Any) -> Any:
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint


def _type_name(hint: Any) -> str:
    """A field type as a user reads it: `int >= 1`, `float in (0, 1]`, `str | null`, ..."""
    if typing.get_origin(hint) is Annotated:
        base, *extras = typing.get_args(hint)
        bounds = []
        for extra in extras:
            for constraint in getattr(extra, "metadata", ()):
                for name, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
                    if hasattr(constraint, name):
                        bounds.append(f"{op} {getattr(constraint, name)}")
        return " ".join([_type_name(base), ", ".join(bounds)]).strip()
    if typing.get_origin(hint) is Literal:
        return " | ".join(repr(arg) for arg in typing.get_args(hint))
    args = typing.get_args(hint)
    if type(None) in args:
        return " | ".join(_type_name(a) for a in args if a is not type(None)) + " | null"
    if dataclasses.is_dataclass(hint):
        return "mapping"
    if typing.get_origin(hint) in (Mapping, dict):
        return "mapping"
    if typing.get_origin(hint) in (tuple, Sequence, list):
        items = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return f"list of {_type_name(items[0])}" if len(set(items)) == 1 else "list"
    return getattr(hint, "__name__", str(hint))


def _plain(value: Any) -> Any:
    """Mappings and tuples as plain dicts and lists, for YAML/JSON."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# Settings that do not change what a run computes, so a resume may change them: where the
# run lives (a moved or copied run resumes), how far it goes (step t's prompts and seeds
# depend on t, not on the total, so a finished run extends exactly), how often it
# checkpoints (every checkpoint resumes exactly), how it reports, and where Ray places its
# actors. `threads` does change the last bits; it is left out here because null resolves
# from the environment, and the loop compares the count each checkpoint recorded instead
# (a warning: continuing on another machine is legitimate, but the resume is not exact).
RESUMABLE_CHANGES = frozenset(
    {"run_dir", "steps", "checkpoint_every", "keep_checkpoints", "progress", "tensorboard"}
    | {"wandb", "ray", "threads"}
)


_UNSET = object()


def _differences(theirs: Any, ours: Any, path: str) -> Iterator[str]:
    if isinstance(theirs, dict) and isinstance(ours, dict):
        for key in sorted(theirs.keys() | ours.keys(), key=str):
            yield from _differences(theirs.get(key, _UNSET), ours.get(key, _UNSET), f"{path}{key}.")
    elif isinstance(theirs, list) and isinstance(ours, list):
        for i in range(max(len(theirs), len(ours))):
            pair = (v[i] if i < len(v) else _UNSET for v in (theirs, ours))
            yield from _differences(*pair, f"{path}{i}.")
    elif theirs != ours:
        shown = ("(unset)" if v is _UNSET else repr(v) for v in (theirs, ours))
        yield f"{path[:-1]}: {' -> '.join(shown)}"


def result_differences(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> list[str]:
    """`dotted.key: theirs -> ours` for each setting that changes results and differs
    between two `TrainConfig.to_dict()` forms (`(unset)`: that side lacks it)."""
    a, b = ({k: v for k, v in d.items() if k not in RESUMABLE_CHANGES} for d in (theirs, ours))
    return list(_differences(a, b, ""))


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `dotted.key=value` override in place; the value is parsed as YAML."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"--set {key}: {'.'.join(parts[: i + 1])} is not a list index")
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
    last = parts[-1]
    value = parse_yaml(raw, f"--set {key}")
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise ConfigError(f"--set {key}: {last!r} is not a valid list index")
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(f"--set {key}: {'.'.join(parts[:-1])} is not a mapping")


def config_from_dict(data: Mapping[str, Any], overrides: Sequence[str] = ()) -> TrainConfig:
    """Build and validate a TrainConfig from plain data plus `key=value` overrides."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"config: expected a mapping, got {type(data).__name__}")
    data = copy.deepcopy(dict(data))
    for assignment in overrides:
        apply_override(data, assignment)
    config = _validated(data)
    _check(config)
    return config


def read_yaml_mapping(path: str | os.PathLike, what: str = "config file") -> dict[str, Any]:
    """The mapping at the top of a YAML file; a missing file, a directory, a syntax error
    or another top-level value is a one-line `ConfigError` naming the file."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} {path} is a directory, not a YAML file")
    if not path.is_file():
        raise ConfigError(f"{what} {path} does not exist")
    data = parse_yaml(path.read_text(), str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got a {_yaml_kind(data)}")
    return data


def _yaml_kind(value: Any) -> str:
    return "list" if isinstance(value, list) else type(value).__name__


def load_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML run config, apply overrides, validate."""
    data = read_yaml_mapping(path)
    try:
        return config_from_dict(data, overrides)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
