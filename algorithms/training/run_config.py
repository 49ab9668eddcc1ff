"""Configuration of one training run: YAML in, frozen validated dataclasses out.

A run is fully determined by its `TrainConfig` and seed: which agents (models)
train, on which prompt stream, with which algorithm and sampling settings. The
same dataclasses are built from a YAML file (`load_config`) or from Python, and
`--set key=value` overrides address nested fields with dots (`env.batch_size=16`,
`agents.0.options.lr=1e-5`, `algorithm_options.delta=0.5`).

The dataclasses are the schema: each field's type (with its range, `Positive`, `Share`, ...)
and help text are written once, on the field; `algorithms.storage.yaml_schema` checks data against
them, so every error is one line naming the full key (`env.batch_size: 'abc' is not an
integer`, `agents.0.options.lrr: unknown option; valid: ...`), and prints them (`graft config
show`). The three option sections, `algorithm_options`, `agents.N.options` and `ray`, stay
mappings of what was written (a run's saved config and a grid cell's hash hold no defaults),
and their schema is their option classes (`metadata["options"]`: AlgorithmConfig with each
strategy's options, HFPolicyOptions / LoaderOptions / VLLMEngineOptions, RayOptions), which
`graft config show` lists under them and `_check` checks them against, with the same one-line
errors (`algorithm_options.dleta: unknown option; valid: ...`). What types cannot say (agent
names, the dataset and algorithm names) is checked here too. Validation keeps every value
equal to what YAML gave (an int temperature becomes an equal float): a run directory compares
its saved config with the new one on resume.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, Strict

from algorithms.library.choice import LibraryChoice
from algorithms.storage.yaml_schema import (
    ConfigError,
    Count,
    Flag,
    PathText,
    Positive,
    PositiveFloat,
    Share,
    Text,
    apply_override,
    plain,
    read_yaml_mapping,
    validate_as,
)
from algorithms.storage.yaml_schema import (
    parse_yaml as parse_yaml,  # re-exported (algorithms.training.loop)
)
from algorithms.training.eval_settings import ProceduralOptions
from algorithms.training.periodic_eval import EvalSpec
from algorithms.training.wandb_sink import WandbSpec
from graft_env.schema import OptionError, check_options
from graft_env.suggest import did_you_mean

if TYPE_CHECKING:
    from algorithms.config import AlgorithmConfig
    from algorithms.library.source import LibrarySource

Backend = Literal["local", "ray"]
AboveOne = Annotated[float, Strict(), Field(gt=1, allow_inf_nan=False)]


# The option classes of the mapping sections (`metadata["options"]`: what `graft config show`
# lists under them and what `_check` checks them against), imported when first used.
def _algorithm_options_class() -> type:
    """The class of `algorithm_options`: AlgorithmConfig with every strategy's options."""
    import algorithms.exchange  # noqa: F401  (importing registers the built-in strategies)
    from algorithms.config import merged_class

    return merged_class()


def _algorithm_option_classes() -> tuple[tuple[str, type], ...]:
    return (("", _algorithm_options_class()),)


def _ray_option_classes() -> tuple[tuple[str, type], ...]:
    """The class of `ray`."""
    from algorithms.training.ray.options import RayOptions

    return (("", RayOptions),)


def _policy_option_classes() -> tuple[tuple[str, type], ...]:
    """The classes of `agents.N.options`, with their keys' prefixes."""
    from graft_env.policies.options import policy_option_classes

    return policy_option_classes()


@dataclass(frozen=True)
class AgentSpec:
    """One policy of the run."""

    name: Text = field(metadata={"help": "unique; names the agent's metrics and checkpoints"})
    model: Text = field(metadata={"help": "registry name (tiny-a, tiny-b, ...) or HF path/id"})
    options: Mapping[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "policy options: HFPolicyOptions fields (lr, dtype, device, ...), "
            "load_policy's rollout_backend, cache_dir, tiny_seed, and vllm_<field>",
            "options": _policy_option_classes,
        },
    )


@dataclass(frozen=True)
class EnvSection:
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
class LibrarySpec:
    """Where `graft-library` looks up peer groups by prompt (algorithms.library)."""

    path: PathText = field(metadata={"help": "the library (graft library build / import)"})
    choose: LibraryChoice = field(
        default="most_recent",
        metadata={
            "help": "a prompt's peer group among those Eq.4 can take: 'most_recent' (latest "
            "written: the least stale), 'highest_k' (most successes, then latest), 'model' "
            "(the latest of `model`'s)"
        },
    )
    model: Text | None = field(
        default=None, metadata={"help": "choose: model's source model id (null otherwise)"}
    )


@dataclass(frozen=True)
class RolloutCorrectionSpec:
    """How own responses are corrected for the engine that sampled them (vLLM: other kernels
    and precision than the trainer's forward): each live agent rescores its own responses
    with its policy's `score` before the batch is built (algorithms.core.rollout_correction)."""

    mode: Literal["monitor", "truncate", "mask"] = field(
        default="truncate",
        metadata={
            "help": "'monitor': rescore and log rollout_correction/* only, train as without; "
            "'truncate': the trainer's log-probs are the ratio's old ones and each token's "
            "term is weighted min(ratio, cap) (TRL's correction); 'mask': the same old "
            "log-probs, and tokens (or responses) whose ratio is outside [1/cap, cap] get "
            "weight 0 (verl's rollout_rs)"
        },
    )
    level: Literal["token", "sequence"] = field(
        default="token",
        metadata={
            "help": "'token': a ratio per token; 'sequence': one per response, exp of the sum "
            "of its token log ratios (verl's and TRL's sequence level)"
        },
    )
    cap: AboveOne = field(
        default=2.0,
        metadata={"help": "the weight's bound: truncate at cap, mask outside [1/cap, cap]"},
    )


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs; every field can be set from YAML or `--set`."""

    # pydantic's setting (not a field): an unknown key here or in any section is an error.
    __pydantic_config__ = ConfigDict(extra="forbid")

    agents: tuple[AgentSpec, ...] = field(metadata={"help": "the policies, at least one"})
    algorithm: Text = field(default="graft", metadata={"help": "registry name (algorithms.make)"})
    algorithm_options: Mapping[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "AlgorithmConfig overrides of the algorithm's preset, e.g. {n: 8}",
            "options": _algorithm_option_classes,
        },
    )
    env: EnvSection = field(default_factory=EnvSection)
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
    library: LibrarySpec | None = field(
        default=None, metadata={"help": "graft-library's trajectory library (null: none)"}
    )
    eval: EvalSpec = field(default_factory=EvalSpec)
    rollout_correction: RolloutCorrectionSpec | None = field(
        default=None,
        metadata={
            "help": "correct own responses for their sampling engine's log-probs (vLLM); "
            "null: off, old log-probs are those recorded while sampling"
        },
    )
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
        metadata={
            "help": "Ray backend options (address, per-agent resources); see docs",
            "options": _ray_option_classes,
        },
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
        _check(validate_as(TrainConfig, self.to_dict()))
        return self

    def to_dict(self) -> dict[str, Any]:
        data = plain(dataclasses.asdict(self))
        for name in ("library", "rollout_correction"):
            if data[name] is None:
                # Left out while unset, so the config.yaml of a run (and a compare cell's
                # hash) recorded before the section existed still equals this one: resumes
                # are allowed.
                del data[name]
        return data


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
    if config.library is not None:
        _check_library(config.library, names, config.stored_peer is not None)
    from graft_env.data import available

    if config.env.dataset not in available():
        raise ConfigError(
            f"env.dataset: unknown dataset {config.env.dataset!r}; valid: {', '.join(available())}"
        )
    validate_as(ProceduralOptions, config.eval.procedural, ConfigError, "eval.procedural")
    for index, agent in enumerate(config.agents):
        check_policy_options(agent.options, f"agents.{index}.options")
        budget = agent.options.get("max_tokens_per_micro_batch")
        if budget is not None and budget <= config.sampling.max_new_tokens:
            raise ConfigError(
                f"agents.{index}.options.max_tokens_per_micro_batch: {budget} leaves no room for "
                f"a prompt beside a full response (sampling.max_new_tokens "
                f"{config.sampling.max_new_tokens}); a row must fit in one micro-batch"
            )
    if config.ray:
        from algorithms.training.ray.options import parse_ray_options

        parse_ray_options(config.ray)
    algorithm = _check_algorithm(config.algorithm, config.algorithm_options)
    check_stored_source(config, config.algorithm, algorithm.stored)


def _check_library(library: LibrarySpec, names: Sequence[str], stored_peer: bool) -> None:
    from algorithms.library import LIBRARY_AGENT

    if stored_peer:
        raise ConfigError("library: set stored_peer (a run to replay) or library, not both")
    if (library.choose == "model") != (library.model is not None):
        raise ConfigError(
            f"library.model: {library.model!r} must be set exactly when library.choose is "
            f"'model' (choose is {library.choose!r})"
        )
    if LIBRARY_AGENT in names:
        raise ConfigError(f"agents: {LIBRARY_AGENT!r} is the library's name in a run; rename it")


def _check_algorithm(name: str, options: Mapping[str, Any]) -> AlgorithmConfig:
    """The algorithm and its options as `algorithms.make` takes them (`algorithms.configure`:
    AlgorithmConfig.validate, no torch); a bad option is `algorithm_options.<key>: ...`."""
    import algorithms

    known = algorithms.available()
    if ":" not in name and name not in known:
        raise ConfigError(
            f"algorithm: unknown algorithm {name!r}{did_you_mean(name, known)}; "
            f"valid: {', '.join(known)}"
        )
    try:
        algorithms.preset(name)  # a `module:Name` reference imports its module here
    except ValueError as error:
        raise ConfigError(f"algorithm: {error}") from None
    where = "algorithm_options"
    try:
        check_options(_algorithm_options_class(), options, where)
        return algorithms.configure(name, **options)
    except OptionError as error:
        raise error.at(where) from None


def check_stored_source(config: TrainConfig, name: str, stored: bool) -> None:
    """A stored-peer algorithm (`stored`: graft-stored, graft-library) has its source
    (stored_peer or library) and trains one receiver alone (GRAFT-SPEC §9); any other has
    no such source."""
    if stored != (config.stored_peer is not None or config.library is not None):
        raise ConfigError(
            f"algorithm: {name!r} (stored={stored}) needs stored_peer or library "
            f"{'set' if stored else 'unset'}"
        )
    if stored and len(config.agents) != 1:
        raise ConfigError(
            f"algorithm: {name!r} trains one receiver alone against a stored peer "
            f"(GRAFT-SPEC §9); got live agents {[a.name for a in config.agents]}"
        )


def check_policy_options(options: Mapping[str, Any], where: str) -> None:
    """An agent's `options` checked as `load_policy` would take them, before any model loads:
    known names, the types and checks of `HFPolicyOptions`, `LoaderOptions` and
    `VLLMEngineOptions` (`vllm_<field>`), and half-precision weights at a learning rate whose
    steps round away (`policies.precision`)."""
    from graft_env.policies.precision import HALF_PRECISION_DTYPES, half_precision_training_error

    classes = _policy_option_classes()
    valid = [prefix + f.name for prefix, cls in classes for f in dataclasses.fields(cls)]
    for key in options:
        if key not in valid:
            raise ConfigError(f"{where}.{key}: unknown option; valid: {', '.join(valid)}")
    built = {}
    for prefix, cls in classes:
        names = {prefix + f.name for f in dataclasses.fields(cls)}
        values = {k.removeprefix(prefix): v for k, v in options.items() if k in names}
        try:
            built[cls.__name__] = cls(**values)
        except OptionError as error:
            raise error.at(where, prefix) from None
    policy = built["HFPolicyOptions"]
    error = half_precision_training_error(policy.dtype, policy.lr)
    if policy.dtype in HALF_PRECISION_DTYPES and error:
        raise ConfigError(f"{where}: {error}")


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


def without_inert_eval(data: Mapping[str, Any]) -> dict[str, Any]:
    """A `TrainConfig.to_dict()` form whose `eval` section is just `{every: 0}` when no
    evaluation runs: its other settings then change nothing (and their defaults may move,
    as the SPEC §10 token cap did, without making old runs unresumable or stale)."""
    section = data.get("eval")
    if isinstance(section, Mapping) and not section.get("every"):
        return {**data, "eval": {"every": 0}}
    return dict(data)


def result_differences(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> list[str]:
    """`dotted.key: theirs -> ours` for each setting that changes results and differs
    between two `TrainConfig.to_dict()` forms (`(unset)`: that side lacks it)."""
    a, b = (
        {k: v for k, v in without_inert_eval(d).items() if k not in RESUMABLE_CHANGES}
        for d in (theirs, ours)
    )
    return list(_differences(a, b, ""))


def config_from_dict(data: Mapping[str, Any], overrides: Sequence[str] = ()) -> TrainConfig:
    """Build and validate a TrainConfig from plain data plus `key=value` overrides."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"config: expected a mapping, got {type(data).__name__}")
    data = copy.deepcopy(dict(data))
    for assignment in overrides:
        apply_override(data, assignment)
    config = validate_as(TrainConfig, data)
    _check(config)
    return config


def check_env(env: EnvSection) -> None:
    """Load the prompt stream as the run will (split, option names and values, data files):
    the run loads it only after its models, minutes later with real ones. Not part of
    `_check`, which every config a grid builds goes through: loading takes a moment (0.3 s
    for the default procedural set)."""
    from graft_env.data import DatasetError, load
    from graft_env.data.registry import dataset_options

    valid = dataset_options(env.dataset)
    for name in env.dataset_options:
        if valid is not None and name not in valid:
            where = f"env.dataset_options.{name}"
            raise ConfigError(f"{where}: unknown option; valid: {', '.join(valid)}")
    try:
        load(env.dataset, env.split, env.data_dir, **env.dataset_options)
    except DatasetError as error:
        where = "env" if error.option is None else f"env.dataset_options.{error.option}"
        raise ConfigError(f"{where}: {error}") from None
    except (ValueError, TypeError) as error:  # a loader's own type check
        raise ConfigError(f"env: {error}") from None


def run_library(config: TrainConfig, algorithm: AlgorithmConfig) -> LibrarySource:
    """The library of graft-library run `config` (its `library` set) as the run will read
    it, against the run's prompt stream (loaded here): the checks need no model, so a run
    makes them before its models load, and `load_config` for `graft config validate`."""
    from algorithms.library.source import LibrarySource
    from graft_env.data import load

    env, spec = config.env, config.library
    problems = load(env.dataset, env.split, env.data_dir, **env.dataset_options)
    texts = [problem.problem for problem in problems]
    return LibrarySource(spec.path, spec.choose, spec.model, texts, algorithm)


def check_library(config: TrainConfig) -> None:
    """Read a graft-library run's library as the run will, against its prompt stream
    (`run_library`: digests, version, the groups it can use), as
    `check_env` does for the stream: the run would read it only after its models. It reads
    the library once more than the run does."""
    from algorithms.library.format import LibraryError

    algorithm = _check_algorithm(config.algorithm, config.algorithm_options)
    try:
        run_library(config, algorithm)
    except LibraryError as error:
        raise ConfigError(f"library: {error}") from None


def load_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML run config, apply overrides, validate (the prompt stream too: `check_env`;
    and a library: `check_library`)."""
    data = read_yaml_mapping(path)
    try:
        config = config_from_dict(data, overrides)
        check_env(config.env)
        if config.library is not None:
            check_library(config)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    return config
