"""The end-of-run summary of `graft train`: where the run is, how it moved, what to run next.

A few lines a user can act on: each agent's reward over the first and the last steps (one
step's reward is noisy, so each end is a mean over up to `window` steps), the all-fail share
and loss of the last step, the newest checkpoint, the metrics file, and the `graft eval`
command that evaluates each trained agent.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from algorithms.run_config import TrainConfig


def run_summary(
    config: TrainConfig,
    rows: Sequence[Mapping[str, Any]],
    threads: int,
    checkpoint: Path | None,
    window: int = 3,
) -> list[str]:
    """The summary lines of a finished run whose metrics rows are `rows` and whose newest
    checkpoint is `checkpoint` (`Trainer.checkpoint`: the run verified or wrote it, so it
    is not hashed again here)."""
    run_dir = Path(config.run_dir)
    lines = [f"{config.algorithm}: {config.steps} steps in {run_dir} (threads: {threads})"]
    for agent in (a.name for a in config.agents):
        own = sorted((r for r in rows if r["agent"] == agent), key=lambda r: r["step"])
        if not own:
            continue
        first, last = own[:window], own[-window:]
        lines.append(
            f"  {agent}: reward {_mean(first)} (steps {_span(first)}) -> {_mean(last)} "
            f"(steps {_span(last)}); last step: all-fail share "
            f"{last[-1]['all_fail_share']:.3f}, loss {last[-1].get('loss', float('nan')):.4f}"
        )
    lines.append(f"  metrics: {run_dir / 'metrics.jsonl'}")
    if checkpoint is None:
        lines.append(f"  checkpoints: none in {run_dir / 'checkpoints'}")
        return lines
    lines.append(f"  checkpoint: {checkpoint}")
    for agent in (a.name for a in config.agents):
        command = ["graft", "eval", "--model", str(checkpoint / agent)]
        command += ["--max-new-tokens", str(config.sampling.max_new_tokens)]
        lines.append(f"  evaluate {agent}: {shlex.join(command)}")
    return lines


def _mean(rows: Sequence[Mapping[str, Any]]) -> str:
    return f"{fmean(r['reward_mean'] for r in rows):.3f}"


def _span(rows: Sequence[Mapping[str, Any]]) -> str:
    steps = [r["step"] for r in rows]
    return str(steps[0]) if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"
