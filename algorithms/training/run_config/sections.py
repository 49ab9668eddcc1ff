"""The sections of a run config (`TrainConfig`'s parts): agents, the prompt stream, sampling,
a stored peer or a library, the rollout correction, and the option classes that the mapping
sections (`algorithm_options`, `agents.N.options`, `ray`) are checked against and listed by
(`metadata["options"]`, imported when first used)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, Strict

from algorithms.library.choice import LibraryChoice
from algorithms.storage.yaml_schema import (
    PathText,
    Positive,
    PositiveFloat,
    Share,
    Text,
)

AboveOne = Annotated[float, Strict(), Field(gt=1, allow_inf_nan=False)]


def algorithm_options_class() -> type:
    """The class of `algorithm_options`: AlgorithmConfig with every strategy's options."""
    import algorithms.exchange  # noqa: F401  (importing registers the built-in strategies)
    from algorithms.config import merged_class

    return merged_class()


def algorithm_option_classes() -> tuple[tuple[str, type], ...]:
    return (("", algorithm_options_class()),)


def ray_option_classes() -> tuple[tuple[str, type], ...]:
    """The class of `ray`."""
    from algorithms.training.ray.options import RayOptions

    return (("", RayOptions),)


def agent_option_classes() -> tuple[tuple[str, type], ...]:
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
            "options": agent_option_classes,
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
    max_logprob_gap: PositiveFloat | None = field(
        default=None,
        metadata={
            "help": "stop the run when an agent's mean |trainer - engine| log-prob per own "
            "token (rollout_correction/logp_diff_mean) is above this many nats: the engine is "
            "not sampling from the trained weights (0.1 argued in algorithms/core/"
            "rollout_correction.py, MAX_LOGPROB_GAP); null: never stop"
        },
    )
