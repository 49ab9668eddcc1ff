"""The end-of-run summary of `graft train`: where the run is, how it moved, what to run next.

A few lines a user can act on: each agent's reward over the first and the last steps (one
step's reward is noisy, so each end is a mean over up to `window` steps; in a short run the
ends share no step, and a one-step run has one), the all-fail share and loss of the last
step, the newest checkpoint, the metrics file, and the `graft eval` command that evaluates
each trained agent.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from algorithms.training.run_config import TrainConfig


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
        size = min(window, len(own) // 2)  # steps per end: ends that overlap say nothing
        ends = (own[:size], own[-size:]) if size else (own,)
        trend = " -> ".join(_reward(end) for end in ends)
        lines.append(
            f"  {agent}: reward {trend}; last step: all-fail share "
            f"{own[-1]['all_fail_share']:.3f}, loss {own[-1].get('loss', float('nan')):.4f}"
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


def _reward(rows: Sequence[Mapping[str, Any]]) -> str:
    """The mean reward of consecutive steps' rows, and which steps: "0.302 (steps 0-2)"."""
    steps = [r["step"] for r in rows]
    span = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    return f"{fmean(r['reward_mean'] for r in rows):.3f} ({span})"
