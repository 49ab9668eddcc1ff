"""`graft plot RUN_DIR`: the learning curves and the exchange funnel of one run, as PNG.

Read from the run's metrics.jsonl (`algorithms.training.metrics.read_rows`), one line per
agent:

- ``learning_curves.png``: the training reward per step (light) with its moving average
  over `SMOOTH` steps, the share of all-fail prompts, and, when the run evaluated
  periodically, held-out pass@1 after N updates (0: before training, `eval_start/...`).
- ``exchange_funnel.png``: per direction an agent receives in (source -> receiver), per
  step, what the exchange kept at each stage: the gate's candidate prompts, the prompts
  kept, the responses transferred and those the floor admitted; and the mean of the
  compatibility scores s the receiver gave. Written only for a run that exchanged.

Nothing here imports torch; the figures go to RUN_DIR/plots/ unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from algorithms.training.metrics import read_rows

SMOOTH = 8  # the reward's trailing moving average, in steps
STAGES = {  # funnel key -> its line; the gate's count falls back to `candidates`
    "gate_candidates": "gate candidates (prompts)",
    "prompts": "prompts kept",
    "transferred": "responses transferred",
    "admitted": "responses admitted",
}
Rows = Sequence[Mapping[str, Any]]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "plot",
        help="learning curves and exchange funnel of one run (PNG)",
        description="Plot one run's metrics.jsonl: training reward, all-fail share and "
        "held-out pass@1 per agent, and the exchange funnel per direction.",
    )
    parser.add_argument("run_dir", help="a graft train run directory (holds metrics.jsonl)")
    parser.add_argument("--out", default=None, help="default: RUN_DIR/plots")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    paths = write_plots(Path(args.run_dir), Path(args.out) if args.out else None)
    print("written: " + ", ".join(str(path) for path in paths))
    return 0


def write_plots(run_dir: Path, out: Path | None = None) -> list[Path]:
    """The run's figures there is data for (`learning_curves.png` always,
    `exchange_funnel.png` when it exchanged), under `out` (default RUN_DIR/plots)."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise ValueError(f"{run_dir}: no metrics.jsonl there (is it a graft train run_dir?)")
    rows = [row for _, row in read_rows(metrics)]
    if not rows:
        raise ValueError(f"{metrics}: no metrics row yet (the run has not finished a step)")
    out = out if out is not None else run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    paths = [plot_learning(rows, out / "learning_curves.png", run_dir.name)]
    funnel = funnel_series(rows)
    if funnel:
        paths.append(plot_funnel(funnel, out / "exchange_funnel.png", run_dir.name))
    return paths


def agents(rows: Rows) -> list[str]:
    return list(dict.fromkeys(row["agent"] for row in rows))


def series(rows: Rows, agent: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` in `agent`'s rows that have it, in step order."""
    points = sorted((r["step"], float(r[key])) for r in rows if r["agent"] == agent and key in r)
    return [s for s, _ in points], [v for _, v in points]


def held_out(rows: Rows, agent: str, metric: str = "average/pass@1") -> tuple[list, list]:
    """(updates completed, held-out `metric`): 0 for the evaluation before training, t + 1
    for the one after step t."""
    start = series(rows, agent, f"eval_start/{metric}")
    after = series(rows, agent, f"eval/{metric}")
    return [0] * len(start[0]) + [s + 1 for s in after[0]], start[1] + after[1]


def _trailing_mean(values: Sequence[float], window: int) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    return np.array([array[max(0, i - window + 1) : i + 1].mean() for i in range(len(array))])


def plot_learning(rows: Rows, path: Path, title: str) -> Path:
    """Reward, all-fail share and (if evaluated) held-out pass@1 per agent."""
    names = agents(rows)
    evaluated = any(held_out(rows, agent)[0] for agent in names)
    panels = 3 if evaluated else 2
    figure = Figure(figsize=(4.8 * panels, 3.8), layout="constrained")
    axes = figure.subplots(1, panels, squeeze=False)[0]
    for i, agent in enumerate(names):
        colour = f"C{i % 10}"
        steps, reward = series(rows, agent, "reward_mean")
        axes[0].plot(steps, reward, color=colour, alpha=0.25, linewidth=0.8)
        smooth = _trailing_mean(reward, SMOOTH)
        axes[0].plot(steps, smooth, color=colour, label=agent)
        steps, fail = series(rows, agent, "all_fail_share")
        axes[1].plot(steps, _trailing_mean(fail, SMOOTH), color=colour, label=agent)
        if evaluated:
            updates, values = held_out(rows, agent)
            axes[2].plot(updates, values, color=colour, marker="o", markersize=4, label=agent)
    axes[0].set_title(f"training reward ({SMOOTH}-step mean; light: each step)", fontsize=10)
    axes[0].set_xlabel("training step")
    axes[1].set_title(f"all-fail share of prompts ({SMOOTH}-step mean)", fontsize=10)
    axes[1].set_xlabel("training step")
    if evaluated:
        axes[2].set_title("held-out pass@1 (average of the sets)", fontsize=10)
        axes[2].set_xlabel("updates (0: before training)")
    for axis in axes:
        axis.grid(alpha=0.3)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncol=len(names), frameon=False)
    figure.suptitle(f"{title}: learning curves")
    figure.savefig(path, dpi=110)
    return path


def funnel_series(rows: Rows) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """direction "S->R" -> stage (`STAGES` and `mean_s`) -> (steps, values), from the
    receiver's rows (a row holds the directions its agent receives in)."""
    out: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for agent in agents(rows):
        pattern = re.compile(rf"exchange/(.+)->{re.escape(agent)}/prompts")
        sources = {
            m.group(1)
            for r in rows
            if r["agent"] == agent
            for k in r
            if (m := pattern.fullmatch(k))
        }
        for source in sorted(sources):
            prefix = f"exchange/{source}->{agent}"
            stages = {}
            for stage in (*STAGES, "mean_s"):
                key = f"{prefix}/{stage}"
                if stage == "gate_candidates" and not any(key in r for r in rows):
                    key = f"{prefix}/candidates"
                found = series(rows, agent, key)
                if found[0]:
                    stages[stage] = found
            out[f"{source}->{agent}"] = stages
    return out


def plot_funnel(
    funnel: Mapping[str, Mapping[str, tuple[list[int], list[float]]]], path: Path, title: str
) -> Path:
    """Top row: the counts of each stage per step, one panel per direction; bottom row: the
    mean compatibility score s of the responses scored."""
    directions = list(funnel)
    figure = Figure(figsize=(5.6 * len(directions), 6.4), layout="constrained")
    axes = figure.subplots(2, len(directions), squeeze=False, sharex="col")
    for column, direction in enumerate(directions):
        stages = funnel[direction]
        top, bottom = axes[0][column], axes[1][column]
        for i, (stage, label) in enumerate(STAGES.items()):
            if stage in stages:
                steps, values = stages[stage]
                top.plot(steps, _trailing_mean(values, SMOOTH), color=f"C{i}", label=label)
        if "mean_s" in stages:
            steps, values = stages["mean_s"]
            bottom.plot(steps, values, color="C4", marker="o", markersize=2, linewidth=0.8)
        else:
            bottom.text(
                0.5, 0.5, "nothing scored", ha="center", va="center", transform=bottom.transAxes
            )
        source, receiver = direction.split("->")
        top.set_title(f"{source} → {receiver}", fontsize=10)
        bottom.set_xlabel("training step")
        for axis in (top, bottom):
            axis.grid(alpha=0.3)
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0][0].set_ylabel(f"per step ({SMOOTH}-step mean)")
    axes[1][0].set_ylabel("mean compatibility s")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncol=len(labels), frameon=False)
    figure.suptitle(f"{title}: exchange funnel")
    figure.savefig(path, dpi=110)
    return path
