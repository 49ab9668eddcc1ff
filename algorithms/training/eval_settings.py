"""What every evaluation setting of the project shares: how each problem is sampled and
which problems are drawn (GRAFT-SPEC §10), with its defaults (`graft_env.eval.protocol`)
and help in one place. `EvalSpec` (a run config's `eval:`, evaluation during training),
the grid's `EvalPlan` (`graft compare`'s final evaluation) and `graft eval`'s options are
built on it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, Strict

from algorithms.storage.yaml_schema import Count, Flag, Positive, Share, Text
from graft_env.data.benchmarks import SOURCES
from graft_env.eval.protocol import PROTOCOL

Temperature = Annotated[float, Strict(), Field(gt=0, le=100)]


@dataclass(frozen=True)
class EvalSettings:
    """Sampling and problem selection of an evaluation (GRAFT-SPEC §10)."""

    k: Positive = field(default=PROTOCOL.k, metadata={"help": "samples per problem"})
    temperature: Temperature = field(
        default=PROTOCOL.temperature, metadata={"help": "sampling temperature"}
    )
    top_p: Share = field(default=PROTOCOL.top_p, metadata={"help": "nucleus sampling mass"})
    max_new_tokens: Positive = field(
        default=PROTOCOL.max_new_tokens,
        metadata={"help": "response cap; less where the model's positions leave less"},
    )
    seed: Count = field(default=PROTOCOL.seed, metadata={"help": "sampling seed"})
    limit: Positive | None = field(
        default=None, metadata={"help": "first N problems per set (null: all)"}
    )
    distinct: Flag = field(
        default=False, metadata={"help": "drop repeated problem texts among those N"}
    )
    procedural: Mapping[str, Any] = field(
        default_factory=dict,
        metadata={"help": "options of procedural/<skill> sets, e.g. {difficulty: 1}"},
    )
    source: Literal[SOURCES] = field(
        default="auto",
        metadata={
            "help": "where benchmark sets are read: files (the data directory), hub (the "
            "Hugging Face Hub) or auto (the file if the data directory has it, else the Hub)"
        },
    )


@dataclass(frozen=True)
class ProceduralOptions:
    """Options of the `procedural/<skill>` evaluation sets (EvalSettings.procedural, checked
    with `validate_as` where a run config or grid is read)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # validated on its own: say so here

    difficulty: Positive | None = field(default=None, metadata={"help": "procedural level"})
    seed: Count | None = field(default=None, metadata={"help": "generator seed"})
    families: tuple[Text, ...] | None = field(
        default=None, metadata={"help": "item families kept (procedural.families), e.g. [carry]"}
    )


SAMPLING = ("k", "temperature", "top_p", "max_new_tokens", "seed")
"""The EvalSettings fields that `graft_env.eval.evaluate.evaluate` takes as arguments (the
others choose the problems, before it runs)."""


def sampling_args(settings: EvalSettings) -> dict[str, Any]:
    """`settings`' arguments for `evaluate(policy, sets, **sampling_args(settings))`."""
    return {name: getattr(settings, name) for name in SAMPLING}


def as_recorded(section: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation section (a dict of EvalSettings fields and more) as run and cell hashes
    and resume checks compare it: `source` is left out at its default, auto, so that the
    runs and cells recorded before it existed (which read the files, as auto does wherever
    they are) stay current; files or hub, named, count."""
    return {k: v for k, v in section.items() if not (k == "source" and v == default("source"))}


def default(name: str) -> Any:
    """The default of EvalSettings field `name` (for command-line options)."""
    return EvalSettings.__dataclass_fields__[name].default


def help_of(name: str) -> str:
    """The help text of EvalSettings field `name`."""
    return EvalSettings.__dataclass_fields__[name].metadata["help"]
