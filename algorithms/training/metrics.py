"""Per-step metrics: what to measure from rollouts, and where to write it.

`MetricsLog` appends one JSON object per (step, agent) to ``metrics.jsonl`` and,
when the `tensorboard` package is importable, mirrors every number to TensorBoard,
one writer per agent under ``tb/<agent>/`` with histograms of s and w and sample
completions (`algorithms.training.tensorboard_sink`), and to wandb when the run config
asks for it (`algorithms.training.wandb_sink`). On resume the JSONL is cut back to the steps
before the checkpoint, so a resumed run's log equals an uninterrupted one's; a torn
last line (the run was killed while appending it) is dropped with a warning.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from algorithms.exchange import ExchangeStats
from algorithms.exchange.stats import distribution
from algorithms.storage.store import atomic_write_bytes
from algorithms.training.tensorboard_sink import TensorBoardSink
from algorithms.training.wandb_sink import WandbSink
from graft_env.types import AgentRollouts

log = logging.getLogger(__name__)


class MetricsError(ValueError):
    """A line of metrics.jsonl other than the last is not a metrics row."""


def _row(line: str) -> dict[str, Any] | None:
    """The metrics row a line holds, or None if it holds none."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    ok = isinstance(row, dict) and isinstance(row.get("step"), int) and "agent" in row
    return row if ok else None


def read_rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Each line of a metrics log with its row. A torn last line (unterminated, or not a
    row: a kill during the append, which can only be of a step after the last checkpoint)
    is dropped with a warning; a damaged line before it is a `MetricsError`."""
    # Damaged bytes decode to U+FFFD, which no JSON row holds outside a string.
    lines = path.read_bytes().decode("utf-8", errors="replace").split("\n")
    terminated = lines[-1] == ""
    if terminated:
        lines.pop()
    out = []
    for number, line in enumerate(lines, 1):
        row = _row(line)
        if number == len(lines) and (row is None or not terminated):
            log.warning(
                "%s: dropped its torn last line %d (%s; the run was killed while writing it)",
                path,
                number,
                "not a metrics row" if row is None else "no newline",
            )
            break
        if row is None:
            raise MetricsError(
                f"{path}:{number}: not a JSON metrics row, and not the last line (a torn "
                "append could only be the last): repair or remove that line"
            )
        out.append((line, row))
    return out


def _cut_back(handle: BinaryIO, size: int) -> str:
    """Cut a log whose append failed back to `size` bytes (truncating needs no free space;
    no fsync, whose failure would not undo the cut: a crash before the cut reaches the disk
    leaves the torn last line that `read_rows` drops); says what is left."""
    try:
        handle.truncate(size)
    except OSError as error:
        return f"and cutting off its part failed too ({error.strerror or error}): a torn last line"
    return "the log keeps its earlier rows only"


def rollout_metrics(rollouts: AgentRollouts, status_counts: Mapping[str, int]) -> dict[str, float]:
    """Reward and group statistics of one agent's rollouts for one step."""
    k, n = rollouts.k, rollouts.n
    lengths = [len(ids) for group in rollouts.token_ids for ids in group]
    metrics = {
        "reward_mean": float(rollouts.rewards.mean()),
        "solved_share": float(np.mean(k >= 1)),
        "all_fail_share": float(np.mean(k == 0)),
        "all_pass_share": float(np.mean(k == n)),
        "response_tokens_mean": float(np.mean(lengths)),
        "response_tokens_max": float(np.max(lengths)),
    }
    metrics.update({f"verifier/{status}": float(c) for status, c in status_counts.items()})
    return metrics


def received_values(exchange: ExchangeStats, agent: str) -> tuple[list[float], list[float]]:
    """The compatibility scores s and weights w of every trajectory `agent` received this
    step, over the directions it receives in."""
    received = [d for (_, receiver), d in exchange.directions.items() if receiver == agent]
    return [s for d in received for s in d.scores], [w for d in received for w in d.weights]


def agent_step_metrics(
    agent: str,
    rollouts: AgentRollouts,
    status_counts: Mapping[str, int],
    update_metrics: Mapping[str, float],
    batch_stats: Mapping[str, int],
    exchange: ExchangeStats,
    timings: Mapping[str, float],
    sampled: int,
) -> dict[str, float]:
    """Everything logged for one agent and step: rollouts, update, batch, exchange, time.

    `sampled` is every response generated for the agent this step, including those
    dynamic sampling drew and discarded (the rollouts hold only the kept ones).

    Exchange counts are those of the directions this agent receives in (plus
    strategy-wide extras); s and w are summarised as distributions; clipped-token
    shares are given separately for the agent's own and its peers' tokens, each
    pooled over the step: clipped tokens / tokens of all its minibatches (the only
    clip fraction logged; the loss reports counts, see `Algorithm.loss`).
    """
    metrics = rollout_metrics(rollouts, status_counts)
    metrics["rollouts_generated"] = float(sampled)
    metrics.update(update_metrics)
    for kind in ("own", "peer"):
        tokens = metrics.get(f"loss_fn/{kind}_tokens", 0.0)
        clipped = metrics.get(f"loss_fn/clipped_{kind}", 0.0)
        metrics[f"clipped_share_{kind}"] = clipped / tokens if tokens else 0.0
    metrics.update({f"batch/{key}": float(value) for key, value in batch_stats.items()})
    scores, weights = received_values(exchange, agent)
    metrics.update(distribution("exchange/s", scores))
    metrics.update(distribution("exchange/w", weights))
    metrics.update(
        {k: v for k, v in exchange.summary().items() if f"->{agent}/" in k or "->" not in k}
    )
    metrics.update({f"time/{phase}": seconds for phase, seconds in timings.items()})
    return metrics


class MetricsLog:
    """Append-only metrics for one run directory."""

    def __init__(
        self, run_dir: str | os.PathLike, tensorboard: bool = True, wandb: WandbSink | None = None
    ) -> None:
        self.wandb = wandb
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tb: TensorBoardSink | None = None
        if tensorboard:
            try:
                self._tb = TensorBoardSink(run_dir)
            except ImportError:
                log.warning("tensorboard is not installed: metrics go to %s only", self.path)

    def truncate_to(self, step: int) -> None:
        """Drop rows of steps >= `step` (resuming from a checkpoint taken before them)."""
        if not self.path.exists():
            return
        kept = [line for line, row in read_rows(self.path) if row["step"] < step]
        text = "".join(line + "\n" for line in kept)
        atomic_write_bytes(
            self.path, text.encode(), what="the metrics log cut back to its checkpoint"
        )

    def write(self, step: int, agent: str, metrics: Mapping[str, Any]) -> None:
        """Append one row, whole or not at all: a failed append (a full disk, whose `OSError`
        names no file) cuts the log back to its rows before it and is an `OSError` naming the
        log, so no torn line is left for a later append to follow (a kill mid-append still
        can leave one: `read_rows` drops it)."""
        row = {"step": step, "agent": agent, **metrics}
        data = (json.dumps(row, sort_keys=True) + "\n").encode()
        with self.path.open("ab", buffering=0) as handle:  # unbuffered: no retry at close
            end = handle.seek(0, os.SEEK_END)
            try:
                written = 0
                while written < len(data):  # a short write is no error; the next one is
                    written += handle.write(data[written:])
                os.fsync(handle.fileno())
            except OSError as error:
                raise OSError(
                    error.errno,
                    f"{error.strerror or error}; the metrics row of step {step} ({agent}) was "
                    f"not written ({_cut_back(handle, end)})",
                    str(self.path),
                ) from error
        if self._tb is not None:
            self._tb.scalars(step, agent, metrics)
        if self.wandb is not None:
            self.wandb.log(step, agent, metrics)

    def write_details(
        self, step: int, agent: str, exchange: ExchangeStats, rollouts: AgentRollouts | None
    ) -> None:
        """What TensorBoard shows beyond the row's numbers: the histograms of the s and w
        `agent` received, and its sample completions (`TensorBoardSink.step`)."""
        if self._tb is not None:
            self._tb.step(step, agent, *received_values(exchange, agent), rollouts)

    def rows(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [row for _, row in read_rows(self.path)]

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self.wandb is not None:
            self.wandb.close()
