"""What one training step produces, and the phases of it that need no `Trainer` state.

`Trainer.run_step` (algorithms.training.loop) runs the phases in order; the ones here are pure
functions of their inputs: the rollout correction's rescoring of own responses
(`correct_rollouts`), the update of every policy on its batch (`update_policies`), the
metrics rows (`step_metrics`) and the phase timer (`timed`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from algorithms.algorithm import BatchCounts
from algorithms.core.rollout_correction import correction_weights
from algorithms.exchange import ExchangeStats
from algorithms.library.source import Lookup, lookup_metrics
from algorithms.training.metrics import agent_step_metrics
from graft_env.policies import LossFn, Policy
from graft_env.types import AgentRollouts, TrainBatch, TransferredGroup

if TYPE_CHECKING:
    from algorithms.training.run_config import RolloutCorrectionSpec

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
    corrections: dict[str, dict[str, float]] = field(default_factory=dict)  # rollout_correction/*


@contextmanager
def timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    """Add the seconds the block takes to `timings[phase]`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = timings.get(phase, 0.0) + time.perf_counter() - start


def correct_rollouts(
    policies: Mapping[str, Policy],
    rollouts: Mapping[str, AgentRollouts],
    spec: RolloutCorrectionSpec,
) -> tuple[dict[str, AgentRollouts], dict[str, dict[str, float]]]:
    """The rollout correction of every live agent (`rollout_correction` of the run config):
    its own responses rescored by its policy's `score` at θ_old, before any update, against
    the log-probs recorded while sampling. Returns each live agent's rollouts, which unless
    `spec.mode` is monitor carry the trainer's log-probs and the weights (`train_logprobs`,
    `rollout_weights`) for its batch to train on, and its `rollout_correction/*` metrics."""
    corrected = {
        name: _correct_own(policy, rollouts[name], spec) for name, policy in policies.items()
    }
    return (
        {name: own for name, (own, _) in corrected.items()},
        {name: metrics for name, (_, metrics) in corrected.items()},
    )


def _correct_own(
    policy: Policy, own: AgentRollouts, spec: RolloutCorrectionSpec
) -> tuple[AgentRollouts, dict[str, float]]:
    """One agent's correction. `score` tokenises the response text again; a response whose
    tokens come out other than the sampled ones (a non-canonical BPE split, a special token
    the text dropped) has no trainer log-probs for its tokens, so it trains as sampled and is
    counted (`rollout_correction/retokenised`), as is one `score` refuses: no text and no EOS
    (cut at max_new_tokens after special tokens only)."""
    responses = own.rewards.size
    pairs = [
        (p, i)
        for p in range(len(own.prompts))
        for i in range(own.n)
        if own.texts[p][i] or own.finish_reasons[p][i] == "stop"
    ]
    scored = policy.score(
        [own.prompts[p] for p, _ in pairs],
        [own.texts[p][i] for p, i in pairs],
        [own.finish_reasons[p][i] for p, i in pairs],
    )
    matched = [
        (p, i, item.logprobs)
        for (p, i), item in zip(pairs, scored, strict=True)
        if list(item.token_ids) == list(own.token_ids[p][i])
    ]
    engine, mask = _padded([own.logprobs[p][i] for p, i, _ in matched])
    trainer, _ = _padded([logprobs for _, _, logprobs in matched])
    result = correction_weights(engine, trainer, mask, spec.mode, spec.level, spec.cap)
    metrics = {f"rollout_correction/{key}": value for key, value in result.metrics.items()}
    metrics["rollout_correction/retokenised"] = float(responses - len(matched))
    if spec.mode == "monitor":
        return own, metrics
    train: list[list[np.ndarray | None]] = [[None] * own.n for _ in own.prompts]
    weights: list[list[np.ndarray | None]] = [[None] * own.n for _ in own.prompts]
    for row, (p, i, logprobs) in enumerate(matched):
        train[p][i] = np.asarray(logprobs, dtype=np.float64)
        weights[p][i] = result.weights[row, : len(logprobs)].copy()
    return dataclasses.replace(own, train_logprobs=train, rollout_weights=weights), metrics


def _padded(rows: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded [R, T] values and their 0/1 mask."""
    width = max((len(row) for row in rows), default=0)
    values, mask = np.zeros((len(rows), width)), np.zeros((len(rows), width))
    for j, row in enumerate(rows):
        values[j, : len(row)] = row
        mask[j, : len(row)] = 1.0
    return values, mask


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
    for name, metrics in out.items():
        metrics.update(record.corrections.get(name, {}))
    return out
