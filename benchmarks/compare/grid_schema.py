"""The grid file's schema and the grid it resolves to.

`GridFile` and its items (`AlgorithmItem`, `PairItem`, `PairBuildItem`, `EvalPlan`,
`PeriodicPlan`) are the file as written: types, ranges and help on the fields, checked by
pydantic and printed by `graft config show --grid`. `GridSpec` (with `AlgorithmEntry`,
`PairSpec`) is the validated grid `grid.grid_from_dict` resolves it to; `agent_name` and `slug`
name its agents and cell directories.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field

from algorithms.storage.yaml_schema import Count, Flag, Positive, Text
from algorithms.training.eval_settings import EvalSettings
from graft_env.eval.protocol import PROTOCOL
from graft_env.policies.tiny.build_files import BuildFiles


def _models_only(value: Any) -> Any:
    """A pair written as its bare model list, `[tiny-a, tiny-b]`, as the mapping form."""
    return {"models": value} if isinstance(value, list | tuple) else value


# The grid file's schema: types, ranges and help once, on the fields (checked by pydantic,
# printed by `graft config show --grid`); what types cannot say is checked in grid_from_dict.
NonEmpty = Field(min_length=1)


@dataclass(frozen=True)
class AlgorithmItem:
    """One `algorithms:` entry as written."""

    name: Text = field(metadata={"help": "registry name (algorithms.make)"})
    label: Text | None = field(default=None, metadata={"help": "display label (null: the name)"})
    options: Mapping[str, Any] = field(
        default_factory=dict, metadata={"help": "AlgorithmConfig overrides over the base's"}
    )
    stored_peer_from: Text | None = field(
        default=None, metadata={"help": "graft-stored: the label whose runs it replays"}
    )
    library_from: Text | None = field(
        default=None,
        metadata={
            "help": "graft-library: the label whose partner runs at other seeds make its "
            "trajectory library (other seeds: other prompt orders)"
        },
    )
    library_runs: Positive | None = field(
        default=None,
        metadata={
            "help": "library_from: how many runs, those of the seeds after the cell's own "
            "in `seeds` (cyclically; never its own; null: 2)"
        },
    )


@dataclass(frozen=True)
class PairBuildItem:
    """A pair's `build:` as written: a built-in pair's finished build kept as files."""

    path: Text = field(
        metadata={
            "help": "the build's directory <pair>-<key> (build.json and a folder per member), "
            "relative to the grid file; loaded from there, never rebuilt"
        }
    )
    weights_sha256: Mapping[str, Text] = field(
        metadata={"help": "each member's weights SHA-256: other weights there are refused"}
    )


@dataclass(frozen=True)
class PairItem:
    """One `pairs:` entry as written (or just its `models` list)."""

    models: Annotated[tuple[Text, ...], Field(min_length=2, max_length=2)] = field(
        metadata={"help": "two model names or paths"}
    )
    options: Mapping[str, Mapping[str, Any]] = field(
        default_factory=dict, metadata={"help": "per-model agent options over the base's"}
    )
    own_skills: Mapping[str, tuple[Text, ...]] = field(
        default_factory=dict, metadata={"help": "per-model skills (tiny pair: from its build)"}
    )
    build: PairBuildItem | None = field(
        default=None,
        metadata={"help": "a built-in pair's committed build, named by weights SHA-256"},
    )


@dataclass(frozen=True)
class AlgorithmEntry:
    """One row group of the table: a registry entry with its overrides and display label."""

    name: str
    label: str
    options: Mapping[str, Any]
    stored_peer_from: str | None
    single_agent: bool  # no live exchange: one run per model (GRPO, graft-stored, graft-library)
    library_from: str | None = None
    library_runs: int = 0  # runs of `library_from` in the library (0: no library)

    @property
    def source(self) -> str | None:
        """The label whose runs this entry reads (a stored peer or a library), if any."""
        return self.stored_peer_from or self.library_from


@dataclass(frozen=True)
class PairSpec:
    """Two models trained side by side (exchange) or each alone (single-agent algorithms)."""

    models: tuple[str, str]
    options: Mapping[str, Mapping[str, Any]]
    own_skills: Mapping[str, tuple[str, ...]]
    build: BuildFiles | None = None  # a committed build the members load from

    @property
    def agents(self) -> tuple[str, str]:
        return agent_name(self.models[0]), agent_name(self.models[1])

    @property
    def pair_id(self) -> str:
        return "+".join(self.agents)


@dataclass(frozen=True, kw_only=True)
class EvalPlan(EvalSettings):
    """The final evaluation (GRAFT-SPEC §10 protocol, smaller on CPU) of every updated model,
    sampled as `EvalSettings` says."""

    sets: Annotated[tuple[Text, ...], NonEmpty] = field(
        metadata={"help": "dataset names, or procedural/<skill> (its test split)"}
    )
    repeats: Positive = field(default=PROTOCOL.repeats, metadata={"help": "whole-protocol repeats"})
    batch_size: Positive = field(
        default=PROTOCOL.batch_size, metadata={"help": "problems per generate call"}
    )
    checkpoint: Literal["best", "final"] = field(
        default="final", metadata={"help": "'best' needs periodic_eval (it picks the best)"}
    )


@dataclass(frozen=True)
class PeriodicPlan:
    """Evaluation during training every `every` steps, on the first `limit` problems."""

    every: Count = field(metadata={"help": "steps between evaluations (0: none)"})
    limit: Positive | None = field(default=None, metadata={"help": "default: eval.limit"})
    k: Positive | None = field(default=None, metadata={"help": "default: eval.k"})


@dataclass(frozen=True)
class GridFile:
    """A grid file as written (after `extends`); `grid_from_dict` resolves it to a GridSpec."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # pydantic's setting, not a field

    base: Any = field(metadata={"help": "run config path (relative to the file) or mapping"})
    algorithms: Annotated[tuple[AlgorithmItem, ...], NonEmpty]
    pairs: Annotated[tuple[Annotated[PairItem, BeforeValidator(_models_only)], ...], NonEmpty]
    seeds: Annotated[tuple[Count, ...], NonEmpty] = field(
        metadata={"help": "training seeds: every algorithm and pair runs once per seed"}
    )
    eval: EvalPlan
    name: Text | None = field(default=None, metadata={"help": "default: the file's stem"})
    train: Mapping[str, Any] = field(
        default_factory=dict, metadata={"help": "deep-merged over the base run config"}
    )
    baseline: Text | None = field(
        default=None, metadata={"help": "the label others compare with (default: the first)"}
    )
    include_base: Flag = field(default=True, metadata={"help": "evaluate the untrained models"})
    periodic_eval: PeriodicPlan | None = field(
        default=None, metadata={"help": "learning curves and the best checkpoint"}
    )
    threads: Positive | None = field(
        default=None, metadata={"help": "torch threads (null: $OMP_NUM_THREADS, else 1)"}
    )
    workers: Positive = field(
        default=1, metadata={"help": "cells run at once, each in a process with `threads`"}
    )


@dataclass(frozen=True)
class GridSpec:
    """A validated grid. `base` is the merged run config every cell starts from; `threads`
    sets torch's CPU threads while the grid runs (None: as for `graft train`,
    $OMP_NUM_THREADS, else 1; a cell's own `threads` is not used); `workers` cells run at
    once, each in its own process with those threads. Neither enters a cell's hash."""

    name: str
    base: Mapping[str, Any]
    algorithms: tuple[AlgorithmEntry, ...]
    pairs: tuple[PairSpec, ...]
    seeds: tuple[int, ...]
    baseline: str
    include_base: bool
    eval: EvalPlan
    periodic: PeriodicPlan | None
    threads: int | None
    workers: int


def agent_name(model: str) -> str:
    """The agent name of a model: its registry name, or the last part of its path."""
    name = Path(str(model).rstrip("/\\")).name or "model"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def slug(label: str) -> str:
    """A label as a directory name: "GRPO n=8" -> "grpo-n-8"."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "x"
