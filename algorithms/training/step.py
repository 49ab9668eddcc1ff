"""What one training step produces, and the phases of it that need no `Trainer` state.

`Trainer.run_step` (algorithms.training.loop) runs the phases in order; the ones here are pure
functions of their inputs: the update of every policy on its batch (`update_policies`),
the metrics rows (`step_metrics`) and the phase timer (`timed`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from algorithms.algorithm import BatchCounts
from algorithms.exchange import ExchangeStats
from algorithms.library.source import Lookup, lookup_metrics
from algorithms.training.metrics import agent_step_metrics
from graft_env.policies import LossFn, Policy
from graft_env.types import AgentRollouts, TrainBatch, TransferredGroup

log = logging.getLogger(__name__)


@dataclass
class StepRecord:
    """What one step did, for metrics, tests and callers driving the loop by hand."""

    step: int
    rollouts: dict[str, AgentRollouts]
    statuses: dict[str, list[str]]
    transfers: dict[str, list[TransferredGroup]]
    exchange_stats: ExchangeStats
    batches: dict[str, TrainBatch]
    batch_counts: dict[str, BatchCounts]
    update_metrics: dict[str, dict[str, float]]
    timings: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)


@contextmanager
def timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    """Add the seconds the block takes to `timings[phase]`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = timings.get(phase, 0.0) + time.perf_counter() - start


def update_policies(
    policies: Mapping[str, Policy],
    batches: Mapping[str, TrainBatch],
    loss: LossFn,
    step: int,
) -> dict[str, dict[str, float]]:
    """Every policy's update on its batch, each started before any is waited for (Ray
    actors train at once); a batch without minibatches is skipped and says so."""
    pending, skipped = {}, {}
    for name, policy in policies.items():
        if batches[name].minibatches:
            pending[name] = policy.update_async(batches[name], loss)
        else:  # e.g. dynamic sampling found no informative group, even after refills
            log.warning("step %d: %s has nothing to train on; update skipped", step, name)
            skipped[name] = {"update_skipped": 1.0}
    return {name: skipped[name] if name in skipped else pending[name].result() for name in policies}


def step_metrics(
    record: StepRecord,
    status_counts: Mapping[str, Mapping[str, int]],
    sampled: Mapping[str, int],
    stored: AgentRollouts | None,
    lookup: Lookup | None,
) -> dict[str, dict[str, float]]:
    """One metrics row per trained agent (`agent_step_metrics`); `stored` is the stored
    peer's rollouts as recorded, `lookup` what the library gave (None: no such peer)."""
    out = {
        name: agent_step_metrics(
            name,
            record.rollouts[name],
            status_counts[name],
            record.update_metrics[name],
            record.batch_counts[name],
            record.exchange_stats,
            record.timings,
            sampled[name],
        )
        for name in record.update_metrics
    }
    if stored is not None:
        changed = np.count_nonzero(stored.rewards != record.rollouts[stored.agent].rewards)
        for metrics in out.values():
            metrics["stored_peer/reward_changed_on_reverify"] = float(changed)
    if lookup is not None:
        for name, metrics in out.items():
            metrics.update(lookup_metrics(lookup, record.transfers[name]))
    return out
