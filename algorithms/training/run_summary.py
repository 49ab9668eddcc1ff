"""The end-of-run summary of `graft train`: where the run is, how it moved, what to run next.

A few lines a user can act on: each agent's reward over the first and the last steps (one
step's reward is noisy, so each end is a mean over up to `window` steps; in a short run the
ends share no step, and a one-step run has one), the all-fail share and loss of the last
step, with periodic evaluation each agent's held-out pass@1 before training and after each
evaluation and the time the evaluations took, the newest checkpoint, the metrics file, and
the `graft eval` command that evaluates each trained agent on the sets that fit its
training: the periodic evaluation's sets, else the held-out test split of the procedural
skills it trains on, else the paper's math benchmarks (`eval_command`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from algorithms.training.periodic_eval import EVAL_TIMES
from algorithms.training.run_config import TrainConfig
from graft_env.data.procedural import SKILLS


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
    lines += _held_out(config, rows)
    lines.append(f"  metrics: {run_dir / 'metrics.jsonl'}")
    if checkpoint is None:
        lines.append(f"  checkpoints: none in {run_dir / 'checkpoints'}")
        return lines
    lines.append(f"  checkpoint: {checkpoint}")
    for agent in (a.name for a in config.agents):
        lines.append(f"  evaluate {agent}: {shlex.join(eval_command(config, checkpoint / agent))}")
    return lines


def eval_command(config: TrainConfig, model: Path) -> list[str]:
    """The `graft eval` command line for a model `config` trained, on the sets that fit it:
    the periodic evaluation's sets (all their problems) with its procedural options and
    response cap; else, for a procedural training set, the held-out test split of the skills
    it trains on at its level; else the default sets (the paper's math benchmarks)."""
    command = ["graft", "eval", "--model", str(model)]
    spec, env = config.eval, config.env
    if spec.every:
        sets, procedural, cap = list(spec.datasets), dict(spec.procedural), spec.max_new_tokens
    elif env.dataset == "procedural":
        options = env.dataset_options
        sets = [f"procedural/{skill}" for skill in options.get("skills") or SKILLS]
        procedural = {k: options[k] for k in ("difficulty", "families") if k in options}
        cap = config.sampling.max_new_tokens
    else:
        sets, procedural, cap = [], {}, config.sampling.max_new_tokens
    if sets:
        command += ["--datasets", ",".join(sets)]
    for key, value in procedural.items():  # `graft eval` reads the value as YAML: JSON is
        command += ["--procedural", f"{key}={json.dumps(value)}"]
    return [*command, "--max-new-tokens", str(cap)]


def _held_out(config: TrainConfig, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each agent's held-out pass@1 before training and after each periodic evaluation, and
    the evaluations' time; nothing when the run evaluated nothing."""
    metric = config.eval.metric
    lines = []
    for agent in (a.name for a in config.agents):
        own = sorted((r for r in rows if r["agent"] == agent), key=lambda r: r["step"])
        points = [(0, r[f"eval_start/{metric}"]) for r in own if f"eval_start/{metric}" in r]
        points += [(r["step"] + 1, r[f"eval/{metric}"]) for r in own if f"eval/{metric}" in r]
        if points:
            trend = " -> ".join(f"{value:.3f} ({updates})" for updates, value in points)
            lines.append(f"  {agent}: held-out {metric} (after N updates) {trend}")
    if not lines:
        return []
    seconds = sum(  # each evaluation's time is in every agent's row: count it once per step
        {r["step"]: sum(r.get(key, 0.0) for key in EVAL_TIMES) for r in rows}.values()
    )
    spec = config.eval
    limit = f"the first {spec.limit}" if spec.limit else "all"
    if spec.distinct:
        limit = f"the distinct of {limit}"
    lines.append(
        f"  held-out sets: {', '.join(spec.datasets)} ({limit} problems each, k = {spec.k}); "
        f"evaluation time {seconds:.0f}s"
    )
    return lines


def _reward(rows: Sequence[Mapping[str, Any]]) -> str:
    """The mean reward of consecutive steps' rows, and which steps: "0.302 (steps 0-2)"."""
    steps = [r["step"] for r in rows]
    span = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    return f"{fmean(r['reward_mean'] for r in rows):.3f} ({span})"
