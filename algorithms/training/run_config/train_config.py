"""`TrainConfig`: one run's config from YAML or Python, validated (`config_from_dict`,
`load_config`), with the run-level checks (agents, dataset, stored source) and the library
a run reads; its sections, checks and resume rules live beside it in this package."""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict

from algorithms.storage.yaml_schema import (
    ConfigError,
    Count,
    Flag,
    PathText,
    Positive,
    Text,
    apply_override,
    plain,
    read_yaml_mapping,
    validate_as,
)
from algorithms.training.eval_settings import ProceduralOptions
from algorithms.training.periodic_eval import EvalSpec
from algorithms.training.run_config.checks import (
    check_algorithm,
    check_env,
    check_library_spec,
    check_policy_options,
    import_referenced,
)
from algorithms.training.run_config.sections import (
    AgentSpec,
    EnvSection,
    LibrarySpec,
    RolloutCorrectionSpec,
    SamplingSpec,
    StoredPeerSpec,
    algorithm_option_classes,
    ray_option_classes,
)
from algorithms.training.wandb_sink import WandbSpec
from graft_env.suggest import did_you_mean

if TYPE_CHECKING:
    from algorithms.config import AlgorithmConfig
    from algorithms.library.source import LibrarySource


Backend = Literal["local", "ray"]


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
            "options": algorithm_option_classes,
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
            "options": ray_option_classes,
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
    """What types cannot say: agent and model names, policy options, the dataset and algorithm
    names."""
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
        check_library_spec(config.library, names, config.stored_peer is not None)
    from graft_env.data import available

    dataset, known = config.env.dataset, available()
    if dataset not in known:
        raise ConfigError(
            f"env.dataset: unknown dataset {dataset!r}; valid: {', '.join(known)}"
            + did_you_mean(dataset, known)
        )
    validate_as(ProceduralOptions, config.eval.procedural, ConfigError, "eval.procedural")
    from graft_env.policies.zoo import check_model_name

    for index, agent in enumerate(config.agents):
        try:
            check_model_name(agent.model)
        except ValueError as error:
            raise ConfigError(f"agents.{index}.model: {error}") from None
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
    algorithm = check_algorithm(config.algorithm, config.algorithm_options)
    check_stored_source(config, config.algorithm, algorithm.stored)


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
            f"(the paper's §6.2); got live agents {[a.name for a in config.agents]}"
        )


def config_from_dict(data: Mapping[str, Any], overrides: Sequence[str] = ()) -> TrainConfig:
    """Build and validate a TrainConfig from plain data plus `key=value` overrides."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"config: expected a mapping, got {type(data).__name__}")
    data = copy.deepcopy(dict(data))
    for assignment in overrides:
        apply_override(data, assignment)
    import_referenced(data.get("algorithm"))
    config = validate_as(TrainConfig, data)
    _check(config)
    return config


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

    algorithm = check_algorithm(config.algorithm, config.algorithm_options)
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
