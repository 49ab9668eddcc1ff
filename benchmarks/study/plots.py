"""The study report's figures (`benchmarks.study.report`): learning curves as small
multiples (one panel per family of labels, one row per model) and the exchange funnel over
training. Every label keeps its colour, line style and marker (`Styles`) in every figure, and
the legend sits below the panels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from benchmarks.compare.plots import Curve

Style = tuple[str, Any, str]  # colour, line style, marker
Styles = Mapping[str, Style]  # label -> its style, in legend order

FUNNEL = {  # row of funnel.png -> y label
    "gate_candidates": "gate candidates\n(prompts / step)",
    "prompts": "kept by balancing\n(prompts / step)",
    "transferred": "transferred\n(responses / step)",
    "admitted": "admitted by the floor\n(responses / step)",
    "clipped_share_peer": "clipped share of\npeer tokens",
    "s": "compatibility s: mean\n(GRAFT: p10-p90 band)",
}
SMOOTH = 8  # funnel.png: centred moving average over this many steps


def _style(style: Style) -> dict[str, Any]:
    colour, line, marker = style
    return {"color": colour, "linestyle": line, "marker": marker, "markersize": 4}


def _legend(figure: Figure, styles: Styles, labels: Sequence[str]) -> None:
    """The labels' legend below the panels (a constrained-layout figure keeps it clear)."""
    handles = [Line2D([], [], label=label, **_style(styles[label])) for label in labels]
    figure.legend(
        handles=handles, loc="outside lower center", ncol=min(4, len(handles)), frameon=False
    )


def plot_learning(
    curves: Mapping[tuple[str, str], Curve],
    models: Sequence[str],
    path: Path,
    title: str,
    families: Mapping[str, Sequence[str]],
    styles: Styles,
) -> Path:
    """Rows: models; columns: `families` (title -> labels); pass@1 in % with a ± std band
    over seeds."""
    # constrained layout: the title and the legend keep their own room at any height (a
    # tight layout's margins are a share of the figure, which a tall one outgrows)
    figure = Figure(figsize=(4.6 * len(families), 3.2 * len(models) + 1.2), layout="constrained")
    axes = figure.subplots(len(models), len(families), squeeze=False, sharex=True)
    drawn: list[str] = []
    for row, model in zip(axes, models, strict=True):
        for axis, (family, labels) in zip(row, families.items(), strict=True):
            for label in labels:
                curve = curves.get((model, label))
                if curve is None:
                    continue
                mean, std = np.array(curve["mean"]) * 100, np.array(curve["std"]) * 100
                axis.plot(curve["step"], mean, **_style(styles[label]))
                colour = styles[label][0]
                low, high = np.clip(mean - std, 0, 100), np.clip(mean + std, 0, 100)  # rates
                axis.fill_between(curve["step"], low, high, color=colour, alpha=0.12)
                drawn.append(label)
            if not any((model, label) in curves for label in labels):
                axis.text(0.5, 0.5, "not run", ha="center", va="center", transform=axis.transAxes)
                axis.set_yticks([])
            axis.set_title(f"{model}: {family}", fontsize=10)
            axis.grid(alpha=0.3)
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        row[0].set_ylabel("pass@1 (%)")
    for axis in axes[-1]:
        axis.set_xlabel("updates (training steps completed)")
    _legend(figure, styles, [label for label in styles if label in drawn])
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    return path


def _smoothed(values: Sequence[float]) -> np.ndarray:
    """Centred moving average over SMOOTH points (fewer at the ends)."""
    array = np.asarray(values, dtype=np.float64)
    half = SMOOTH // 2
    return np.array([array[max(0, i - half) : i + SMOOTH - half].mean() for i in range(len(array))])


def plot_funnel(
    data: Mapping[str, Mapping[str, Any]], path: Path, styles: Styles, band_label: str
) -> Path:
    """Rows: funnel quantities; columns: directions (S->R); one line per exchanging label,
    and `band_label`'s p10-p90 band of s (one band: several would hide each other)."""
    directions = sorted({d for by_direction in data.values() for d in by_direction})
    figure = Figure(figsize=(6.2 * len(directions), 2.2 * len(FUNNEL) + 1.2), layout="constrained")
    axes = figure.subplots(len(FUNNEL), len(directions), squeeze=False, sharex=True)
    for column, direction in enumerate(directions):
        source, receiver = direction.split("->")
        axes[0][column].set_title(f"{source} → {receiver}", fontsize=10)
        for label, by_direction in data.items():
            curves = by_direction.get(direction, {}).get("curves", {})
            for row, name in enumerate(FUNNEL):
                curve = curves.get("s_mean" if name == "s" else name)
                if curve and curve["step"]:
                    smooth = _smoothed(curve["mean"])
                    axes[row][column].plot(
                        curve["step"], smooth, **_style(styles[label]), markevery=8
                    )
            if label == band_label and "s_p10" in curves:
                low, high = curves["s_p10"], curves["s_p90"]
                band = _smoothed(low["mean"]), _smoothed(high["mean"])
                axes[-1][column].fill_between(
                    low["step"], *band, color=styles[label][0], alpha=0.12
                )
    for row, ylabel in enumerate(FUNNEL.values()):
        axes[row][0].set_ylabel(ylabel, fontsize=9)
        for axis in axes[row]:
            axis.grid(alpha=0.3)
    for axis in axes[-1]:
        axis.set_xlabel("training step")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend(figure, styles, [label for label in styles if label in data])
    figure.suptitle(f"Exchange funnel: mean over seeds, {SMOOTH}-step moving average")
    figure.savefig(path, dpi=110)
    return path
