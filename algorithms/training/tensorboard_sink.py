"""TensorBoard mirror of the per-step metrics, one writer per agent.

Each agent's events go to ``run_dir/tb/<agent>/`` under the same tag names (the keys of
metrics.jsonl; the directions an agent receives in as `exchange/received/...`, `tags`), so
TensorBoard overlays the agents' curves of one tag. Besides the scalars
it logs, per step, histograms of the compatibility scores s and the weights w of the
trajectories the agent received (`exchange/s`, `exchange/w`), and every `samples_every`
steps a text table of sample completions (`samples`: the first response to each of the
first prompts, with its reward). A writer opened on a resumed run purges its agent's events
from the resumed step on, so steps a resumed run logs again are not shown twice.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graft_env.types import AgentRollouts

log = logging.getLogger(__name__)

TB_DIR = "tb"
SAMPLE_PROMPTS = 4  # rows of the completions table
SAMPLE_CHARS = 400  # each prompt and response is cut to this many characters


def tags(metrics: Mapping[str, float], agent: str) -> dict[str, float]:
    """A row's numbers by TensorBoard tag: its key, except that the directions `agent`
    receives in (`exchange/<source>-><agent>/<name>`) are `exchange/received/<name>` when it
    receives from one source (so a pair's two agents overlay) and
    `exchange/received/<source>/<name>` when from several."""
    pattern = re.compile(rf"exchange/(.+)->{re.escape(agent)}/(.+)")
    found = {key: m for key in metrics if (m := pattern.fullmatch(key))}
    one = len({m.group(1) for m in found.values()}) == 1
    out = {}
    for key, value in metrics.items():
        m = found.get(key)
        if m is None:
            out[key] = value
        else:
            out[f"exchange/received/{m.group(2) if one else '/'.join(m.groups())}"] = value
    return out


def samples_table(rollouts: AgentRollouts, rows: int = SAMPLE_PROMPTS) -> str:
    """A Markdown table of the first response to each of the first `rows` prompts: prompt,
    response, reward (TensorBoard's text plugin renders Markdown)."""
    lines = ["| prompt | response | reward |", "|---|---|---:|"]
    for p in range(min(rows, len(rollouts.prompts))):
        cells = (_cell(rollouts.prompts[p]), _cell(rollouts.texts[p][0]))
        lines.append(f"| {cells[0]} | {cells[1]} | {float(rollouts.rewards[p][0]):g} |")
    return "\n".join(lines)


def _cell(text: str) -> str:
    """`text` as one Markdown table cell: cut, pipes escaped, line breaks as <br>."""
    cut = text if len(text) <= SAMPLE_CHARS else text[:SAMPLE_CHARS] + " …"
    return cut.replace("|", "\\|").replace("\r", "").replace("\n", "<br>")


class TensorBoardSink:
    """Writers under ``run_dir/tb/<agent>/``, each opened at the first step it logs."""

    def __init__(self, run_dir: str | os.PathLike, samples_every: int = 10) -> None:
        from torch.utils.tensorboard import SummaryWriter  # ImportError: no tensorboard

        self._writer_class = SummaryWriter
        self.root = Path(run_dir) / TB_DIR
        self.samples_every = samples_every
        self._writers: dict[str, Any] = {}

    def _writer(self, agent: str, step: int) -> Any:
        if agent not in self._writers:
            # purge_step: events of steps >= `step` left by an earlier (interrupted) run
            # of this directory are dropped, as metrics.jsonl's rows after the checkpoint are
            self._writers[agent] = self._writer_class(str(self.root / agent), purge_step=step)
        return self._writers[agent]

    def scalars(self, step: int, agent: str, metrics: Mapping[str, Any]) -> None:
        """Every number of one metrics row, tagged with its key (`tags`)."""
        writer = self._writer(agent, step)
        numbers = {
            key: value
            for key, value in metrics.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }
        for key, value in tags(numbers, agent).items():
            writer.add_scalar(key, value, step)

    def step(
        self,
        step: int,
        agent: str,
        scores: Sequence[float],
        weights: Sequence[float],
        rollouts: AgentRollouts | None,
    ) -> None:
        """The histograms of the s and w the agent received (none when it received
        nothing) and, every `samples_every` steps, its completions table."""
        writer = self._writer(agent, step)
        if len(scores):
            writer.add_histogram("exchange/s", np.asarray(scores, dtype=np.float64), step)
        if len(weights):
            writer.add_histogram("exchange/w", np.asarray(weights, dtype=np.float64), step)
        if rollouts is not None and self.samples_every and step % self.samples_every == 0:
            writer.add_text("samples", samples_table(rollouts), step)

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
