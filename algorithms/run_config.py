"""Configuration of one training run: YAML in, frozen validated dataclasses out.

A run is fully determined by its `TrainConfig` and seed: which agents (models)
train, on which prompt stream, with which algorithm and sampling settings. The
same dataclasses are built from a YAML file (`load_config`) or from Python, and
`--set key=value` overrides address nested fields with dots (`env.batch_size=16`,
`agents.0.options.lr=1e-5`, `algorithm_options.delta=0.5`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from algorithms.periodic_eval import EvalSpec
from algorithms.wandb_sink import WandbSpec
from graft_env.policies.hf_options import HFPolicyOptions
from graft_env.policies.precision import HALF_PRECISION_DTYPES, half_precision_training_error
from graft_env.threads import valid_threads


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


def parse_yaml(text: str):
    """Parse YAML text with `_Loader`."""
    return yaml.load(text, Loader=_Loader)


BACKENDS = ("local", "ray")


class ConfigError(ValueError):
    """A run configuration is invalid; the message names the field."""


@dataclass(frozen=True)
class AgentSpec:
    """One policy of the run."""

    name: str
    model: str = field(metadata={"help": "registry name (tiny-a, tiny-b, ...) or HF path/id"})
    options: Mapping[str, Any] = field(
        default_factory=dict, metadata={"help": "backend options: lr, dtype, device, ..."}
    )


@dataclass(frozen=True)
class EnvSpec:
    """The shared prompt stream."""

    dataset: str = "procedural"
    split: str | None = "train"
    data_dir: str | None = None
    dataset_options: Mapping[str, Any] = field(default_factory=dict)
    batch_size: int = field(default=8, metadata={"help": "prompts per step (paper: 128)"})


@dataclass(frozen=True)
class SamplingSpec:
    """Rollout sampling (paper: temperature 1.0, top-p 1.0)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128


@dataclass(frozen=True)
class StoredPeerSpec:
    """Where `graft-stored` reads its partner's trajectories (GRAFT-SPEC §9)."""

    run_dir: str
    agent: str


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs; every field can be set from YAML or `--set`."""

    agents: tuple[AgentSpec, ...]
    algorithm: str = "graft"
    algorithm_options: Mapping[str, Any] = field(default_factory=dict)
    env: EnvSpec = field(default_factory=EnvSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    steps: int = 10
    seed: int = 0
    run_dir: str = "runs/default"
    checkpoint_every: int = field(default=5, metadata={"help": "steps between checkpoints"})
    keep_checkpoints: int = 2
    store_trajectories: bool = True
    stored_peer: StoredPeerSpec | None = None
    eval: EvalSpec = field(default_factory=EvalSpec)
    dynamic_max_rounds: int = field(
        default=3, metadata={"help": "dynamic sampling: extra prompt batches drawn per step"}
    )
    tensorboard: bool = True
    wandb: WandbSpec | None = field(
        default=None, metadata={"help": "wandb project/mode/...; absent: no wandb"}
    )
    progress: bool = True
    backend: str = field(
        default="local",
        metadata={"help": "'local': policies in this process; 'ray': one Ray actor per agent"},
    )
    ray: Mapping[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Ray backend options (address, per-agent resources); see docs"},
    )
    threads: int | None = field(
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
        if not self.agents:
            raise ConfigError("agents: at least one agent is required")
        names = [a.name for a in self.agents]
        if len(set(names)) != len(names):
            raise ConfigError(f"agents: names must be unique, got {names}")
        if self.stored_peer is not None and self.stored_peer.agent in names:
            raise ConfigError(
                f"stored_peer.agent {self.stored_peer.agent!r} clashes with a live agent name"
            )
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {list(BACKENDS)}, got {self.backend!r}")
        for index, agent in enumerate(self.agents):
            _check_precision(agent.options, f"agents.{index}.options")
        if self.threads is not None and not valid_threads(self.threads):
            raise ConfigError(
                f"invalid value for threads: {self.threads!r} (an integer >= 1, or null for "
                "$OMP_NUM_THREADS, else 1)"
            )
        checks = {
            "steps": self.steps >= 1,
            "env.batch_size": self.env.batch_size >= 1,
            "sampling.max_new_tokens": self.sampling.max_new_tokens >= 1,
            "sampling.temperature": self.sampling.temperature > 0,
            "sampling.top_p": 0 < self.sampling.top_p <= 1,
            "checkpoint_every": self.checkpoint_every >= 1,
            "keep_checkpoints": self.keep_checkpoints >= 1,
            "dynamic_max_rounds": self.dynamic_max_rounds >= 0,
            "eval.every": self.eval.every >= 0,
            "eval.k": self.eval.k >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ConfigError(f"invalid value for {bad[0]}: {self._get(bad[0])!r}")
        return self

    def _get(self, dotted: str) -> Any:
        value: Any = self
        for part in dotted.split("."):
            value = getattr(value, part)
        return value

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))


def _check_precision(options: Mapping[str, Any], where: str) -> None:
    """Refuse half-precision weights at a learning rate whose steps round away, before
    any model loads (`HFPolicy.update` would refuse only after the first rollout)."""
    dtype = options.get("dtype", "float32")
    if dtype not in HALF_PRECISION_DTYPES:
        return
    lr = options.get("lr", HFPolicyOptions.lr)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)):
        raise ConfigError(f"{where}.lr must be a number, got {lr!r}")
    error = half_precision_training_error(dtype, float(lr))
    if error:
        raise ConfigError(f"{where}: {error}")


def _plain(value: Any) -> Any:
    """Mappings and tuples as plain dicts and lists, for YAML/JSON."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _build(cls: type, data: Any, where: str) -> Any:
    """Construct dataclass `cls` from a mapping, rejecting unknown keys by name."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"{where or 'config'}: unknown key(s) {unknown}; valid keys: {sorted(fields)}"
        )
    kwargs = {}
    for name, value in data.items():
        path = f"{where}.{name}" if where else name
        nested = _NESTED.get((cls, name))
        if nested is AgentSpec:
            if not isinstance(value, Sequence) or isinstance(value, str):
                raise ConfigError(f"{path}: expected a list of agents")
            kwargs[name] = tuple(_build(AgentSpec, v, f"{path}.{i}") for i, v in enumerate(value))
        elif nested is not None and value is not None:
            kwargs[name] = _build(nested, value, path)
        else:
            kwargs[name] = value
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{where or 'config'}: {error}") from None


_NESTED: dict[tuple[type, str], type] = {
    (TrainConfig, "agents"): AgentSpec,
    (TrainConfig, "env"): EnvSpec,
    (TrainConfig, "sampling"): SamplingSpec,
    (TrainConfig, "stored_peer"): StoredPeerSpec,
    (TrainConfig, "eval"): EvalSpec,
    (TrainConfig, "wandb"): WandbSpec,
}


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
    value = parse_yaml(raw)
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
    data = copy.deepcopy(dict(data))
    for assignment in overrides:
        apply_override(data, assignment)
    return _build(TrainConfig, data, "").validate()


def load_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML run config, apply overrides, validate."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    data = parse_yaml(path.read_text()) or {}
    try:
        return config_from_dict(data, overrides)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
