"""A progress bar for training runs: step count, time, and the numbers that matter.

Shows, per agent, the rollout reward and the share of all-fail groups, and the
prompts received through the exchange — enough to see at a glance whether a run
learns and whether the exchange acts.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

if TYPE_CHECKING:
    from algorithms.training.step import StepRecord


def summary(record: StepRecord) -> str:
    """One line: `name r=0.41 fail=0.25 got=3` per agent."""
    parts = []
    for name, metrics in record.metrics.items():
        received = sum(len(groups) for r, groups in record.transfers.items() if r == name)
        parts.append(
            f"{name} r={metrics['reward_mean']:.2f} fail={metrics['all_fail_share']:.2f} "
            f"got={received}"
        )
    return "  ".join(parts)


class StepProgress:
    """Context manager around rich's Progress; silent when disabled."""

    def __init__(self, total: int, start: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self._console = Console()
        # Without a terminal (CI, nohup, a log file) rich draws the bar once, at the end:
        # print one plain line per step there instead.
        self._lines = enabled and not self._console.is_terminal
        self._step, self._total, self._started = start, total, time.monotonic()
        self._progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
            console=self._console,
            disable=not enabled or self._lines,
        )
        self._task = self._progress.add_task("train", total=total, completed=start, info="")

    def __enter__(self) -> StepProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)

    def update(self, record: StepRecord) -> None:
        self._step += 1
        if self._lines:
            elapsed = time.monotonic() - self._started
            line = f"train {self._step}/{self._total} {elapsed:.0f}s  {summary(record)}"
            self._console.print(line, markup=False, highlight=False, soft_wrap=True)
        self._progress.update(self._task, advance=1, info=summary(record))
