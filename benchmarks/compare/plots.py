"""Curves of a comparison grid and their plots (PNG, matplotlib).

- Learning curves: each row's training reward (every step: the reward of the rollouts
  the policy drew after t updates) and, with periodic evaluation, its pass@1 on the
  evaluation sets after t updates.
- Complementarity curve: per step, the share of a model's all-fail training prompts
  (k = 0 of n) that its peer solved at least once at the same step, from both runs'
  per-prompt success counts. For an exchange cell the peer is the partner in the run;
  for single-agent cells (GRPO) it is the partner's own run with the same seed, which
  sees the same prompt stream.

Every curve is mean ± std over seeds (sample std), on the steps every seed has a value
for, drawn as a line; the baseline's and GRAFT's also with a ± std band. Rows are keyed
(model, pair id, label) as in `benchmarks.compare.report`.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from benchmarks.compare.report import Key, Record, grouped, peer_record, seed_stats

Curve = dict[str, list[float]]  # {"step": [...], "mean": [...], "std": [...]}


def band(series: Sequence[Mapping[int, float]]) -> Curve:
    """Mean ± std per step over seeds, on the steps every seed has a value for."""
    steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
    stats = [seed_stats([s[step] for s in series]) for step in steps]
    return {"step": steps, "mean": [m for m, _, _ in stats], "std": [s for _, s, _ in stats]}


def learning_curves(records: Sequence[Record], metric: str) -> dict[Key, Curve]:
    """`reward_mean` (every step) or `eval_average` (periodic evaluation) per row."""
    steps_key = "step" if metric == "reward_mean" else "eval_step"
    curves = {}
    for key, members in grouped([r for r in records if r["curves"]]).items():
        series = [
            dict(zip(r["curves"][steps_key], r["curves"][metric], strict=True)) for r in members
        ]
        if all(series):
            curves[key] = band(series)
    return curves


def complementarity(record: Record, peer: Record) -> dict[int, float]:
    """Step t -> share of `record`'s all-fail prompts at step t where `peer` had k >= 1.

    Prompts are matched by id, so a step where the peer drew other prompts (dynamic
    sampling refills) compares only the shared ones; a step without any all-fail
    prompt of `record` has no value.
    """
    theirs = {
        c["step"]: dict(zip(c["prompt_ids"], c["k"], strict=True)) for c in peer["train_counts"]
    }
    shares = {}
    for counts in record["train_counts"]:
        peer_k = theirs.get(counts["step"], {})
        pairs = zip(counts["prompt_ids"], counts["k"], strict=True)
        failed = [prompt for prompt, k in pairs if k == 0 and prompt in peer_k]
        if failed:
            shares[counts["step"]] = sum(peer_k[p] > 0 for p in failed) / len(failed)
    return shares


def complementarity_curves(records: Sequence[Record]) -> dict[Key, Curve]:
    """The complementarity curve of every trained row whose peer trained the same way."""
    trained = [r for r in records if r["train_counts"]]
    curves = {}
    for key, members in grouped(trained).items():
        peers = [peer_record(r, trained) for r in members]
        series = [complementarity(r, p) for r, p in zip(members, peers, strict=True) if p]
        if series and all(series):
            curves[key] = band(series)
    return curves


LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D")


def arm_styles(labels: Sequence[str]) -> dict[str, dict[str, Any]]:
    """label -> its line style in every panel and figure: the ten tab10 colours in turn, and
    after each ten the next dash pattern and marker, so no two of up to 40 arms look alike."""
    return {
        label: {
            "color": f"C{i % 10}",
            "linestyle": LINE_STYLES[i // 10 % len(LINE_STYLES)],
            "marker": MARKERS[i // 10 % len(MARKERS)],
        }
        for i, label in enumerate(labels)
    }


def plot_curves(
    curves: Mapping[Key, Curve],
    path: str | Path,
    title: str,
    ylabel: str,
    labels: Sequence[str] = (),
    banded: Collection[str] = (),
) -> Path:
    """One panel per (model, pair), one line per label (`arm_styles`, in the order of
    `labels`, then of `curves`) and a ±std band for the labels in `banded` only (the
    baseline's and GRAFT's: more bands hide each other); the legend sits below the panels.
    Returns the path."""
    panels = list(dict.fromkeys(key[:2] for key in curves))
    if not panels:
        raise ValueError(f"plot_curves: no curves to draw for {title!r}")
    order = list(dict.fromkeys([*labels, *(key[2] for key in curves)]))
    drawn = [label for label in order if any(key[2] == label for key in curves)]
    styles = arm_styles(order)
    columns = min(len(drawn), 5)
    legend_rows = -(-len(drawn) // columns)
    # a bare Figure (no pyplot): no global state, no display needed; the constrained layout
    # keeps the title and the legend below the panels clear of them
    figure = Figure(figsize=(5 * len(panels), 3.6 + 0.25 * legend_rows), layout="constrained")
    axes = figure.subplots(1, len(panels), squeeze=False)
    for axis, panel in zip(axes[0], panels, strict=True):
        for label in drawn:
            curve = curves.get((*panel, label))
            if curve is None:
                continue
            mean, std = curve["mean"], curve["std"]
            axis.plot(curve["step"], mean, markersize=3, **styles[label])
            if label in banded:
                # every plotted quantity is a rate: keep the ± std band inside [0, 1]
                low = [max(0.0, m - s) for m, s in zip(mean, std, strict=True)]
                high = [min(1.0, m + s) for m, s in zip(mean, std, strict=True)]
                colour = styles[label]["color"]
                axis.fill_between(curve["step"], low, high, color=colour, alpha=0.15)
        peer = next(a for a in panel[1].split("+") if a != panel[0]) if "+" in panel[1] else ""
        axis.set_title(f"{panel[0]}" + (f" (peer {peer})" if peer else ""))
        axis.set_xlabel("updates (training steps completed)")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
    handles = [
        Line2D(
            [],
            [],
            markersize=4,
            label=label + (" (± std)" if label in banded else ""),
            **styles[label],
        )
        for label in drawn
    ]
    figure.legend(handles=handles, loc="outside lower center", ncol=columns, frameon=False)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    return Path(path)


def write_plots(
    records: Sequence[Record],
    out_dir: str | Path,
    labels: Sequence[str] = (),
    banded: Collection[str] = (),
) -> list[Path]:
    """curves.json and the PNGs there is data for: learning curves (training reward and,
    with periodic evaluation, pass@1) and the complementarity curve; `labels` orders the
    arms' styles and `banded` names the arms drawn with a ± std band (`plot_curves`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = {
        "reward_mean": ("Training reward (mean over rollouts)", "reward"),
        "eval_average": ("Periodic evaluation: pass@1, average of the sets", "pass@1"),
        "complementarity": ("All-fail training prompts the peer solved", "share"),
    }
    data = {
        "reward_mean": learning_curves(records, "reward_mean"),
        "eval_average": learning_curves(records, "eval_average"),
        "complementarity": complementarity_curves(records),
    }
    paths = [out_dir / "curves.json"]
    as_lists = {
        name: [
            {"model": m, "pair": p, "label": label, **curve} for (m, p, label), curve in c.items()
        ]
        for name, c in data.items()
    }
    paths[0].write_text(json.dumps(as_lists, indent=2) + "\n")
    for name, curves in data.items():
        if curves:
            title, ylabel = figures[name]
            path = out_dir / f"{name}.png"
            paths.append(plot_curves(curves, path, title, ylabel, labels, banded))
    return paths
