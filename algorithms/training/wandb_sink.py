"""Optional Weights & Biases mirror of the per-step metrics.

The JSONL file stays the record of a run; wandb is a view of it. One wandb run
belongs to one run directory: its id is kept in ``wandb_id.txt`` there, so a
resumed training run continues the same wandb run. Every row carries its
training step as ``train/step`` (declared as the step metric), so rows a resumed
run logs again for steps after its checkpoint are plotted at their true step.
``mode: offline`` writes under the run directory without any network access;
``wandb sync`` uploads it later.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WANDB_MODES = ("online", "offline", "disabled")


@dataclass(frozen=True)
class WandbSpec:
    """Where metrics go in wandb; absent from a config means no wandb at all."""

    project: str = field(metadata={"help": "wandb project the run logs to (non-empty)"})
    entity: str | None = field(
        default=None, metadata={"help": "wandb team or user (null: your default entity)"}
    )
    name: str | None = field(default=None, metadata={"help": "default: the run directory name"})
    group: str | None = field(
        default=None,
        metadata={"help": "wandb group the run is shown under with others (null: none)"},
    )
    tags: Sequence[str] = field(default=(), metadata={"help": "wandb tags of the run"})
    mode: str = field(default="online", metadata={"help": "online, offline or disabled"})

    def __post_init__(self) -> None:
        if self.mode not in WANDB_MODES:
            raise ValueError(f"wandb.mode must be one of {list(WANDB_MODES)}, got {self.mode!r}")
        if not self.project:
            raise ValueError("wandb.project must be a non-empty string")


class WandbSink:
    """Logs (step, agent, metrics) rows to one wandb run, keys prefixed by agent."""

    def __init__(self, spec: WandbSpec, run_dir: str | os.PathLike, config: Mapping[str, Any]):
        try:
            import wandb
        except ImportError:
            raise ImportError(
                "the run config has a `wandb` section but wandb is not installed; "
                "install the extra: pip install 'graft-rlvr[wandb]'"
            ) from None
        run_dir = Path(run_dir)
        id_file = run_dir / "wandb_id.txt"
        if not id_file.exists():
            id_file.write_text(uuid.uuid4().hex[:16] + "\n")
        self._run = wandb.init(
            project=spec.project,
            entity=spec.entity,
            name=spec.name or run_dir.name,
            group=spec.group,
            tags=list(spec.tags),
            mode=spec.mode,
            dir=str(run_dir),
            id=id_file.read_text().strip(),
            resume="allow",
            config=dict(config),
        )
        self._run.define_metric("train/step")
        self._run.define_metric("*", step_metric="train/step")

    @property
    def run_id(self) -> str:
        return self._run.id

    def log(self, step: int, agent: str, metrics: Mapping[str, Any]) -> None:
        numbers = {
            f"{agent}/{key}": value
            for key, value in metrics.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }
        self._run.log({"train/step": step, **numbers})

    def close(self) -> None:
        self._run.finish()
