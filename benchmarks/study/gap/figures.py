"""The gap study's dose-response figure: arm - GRPO n=8 against the measured dose, per scope."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from benchmarks.study.gap.design import ARMS, SCOPES
from benchmarks.study.plots import _legend, _style
from benchmarks.study.report import GRPO8, STYLES


def plot_dose_response(report: Mapping[str, Any], path: Path) -> Path | None:
    """arm - GRPO n=8 against the measured dose, one panel per scope, bootstrap intervals."""
    doses = report["doses"]
    found = [e for e in report["contrasts"] if e["hypothesis"] == "D" and e["verdict"] != "not run"]
    if not found:
        return None
    figure = Figure(figsize=(13.5, 4.2), layout="constrained")
    axes = figure.subplots(1, len(SCOPES), squeeze=False)[0]
    drawn = []
    for axis, scope in zip(axes, SCOPES, strict=True):
        for arm in ARMS:
            points = []
            for e in found:
                pair = next(t for t in e["contrast"].split() if t.startswith("gap-"))
                if e["scope"] != scope or e["terms"][0]["label"] != arm:
                    continue
                x = (
                    doses[pair]["measured"]
                    if scope == "pooled"
                    else doses[pair]["members"][scope]["measured"]
                )
                if x is not None:
                    points.append((x, e["bootstrap"]))
            if not points:
                continue
            points.sort(key=lambda p: p[0])
            xs = [p[0] for p in points]
            ys = np.array([p[1]["mean"] for p in points])
            errors = [ys - [p[1]["low"] for p in points], [p[1]["high"] for p in points] - ys]
            axis.errorbar(xs, ys, yerr=errors, capsize=3, **_style(STYLES[arm]))
            drawn.append(arm)
        axis.axhline(0.0, color="grey", linewidth=0.8)
        axis.set_title(f"scope {scope}", fontsize=10)
        axis.set_xlabel("measured dose: base pass@1 on the gap (%)")
        axis.grid(alpha=0.3)
    axes[0].set_ylabel(f"arm - {GRPO8} (points)")
    _legend(figure, STYLES, [label for label in STYLES if label in drawn])
    figure.suptitle("Dose-response: mean over seeds, 95 % bootstrap intervals")
    figure.savefig(path, dpi=110)
    return path
