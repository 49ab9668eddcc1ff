"""The rollout correction: importance weights between a sampling engine and the trainer.

A vLLM engine samples with other kernels (and often another precision) than the trainer's
forward, so the log-probs it records are not the trainer's at θ_old and a PPO ratio taken
against them is off. TRL (`vllm_importance_sampling_correction`) and verl (`rollout_is`,
`rollout_rs`) correct it the same way: the trainer rescores the sampled tokens, its log-probs
become the ratio's old log-probs, and each token's surrogate term is multiplied by a constant
importance weight of trainer over engine. This module is that weight and what it measured,
on padded [B, T] numpy arrays; the loop rescores and the loss multiplies.

With d = trainer - engine per token (the log ratio):

- level "token":    ratio_t = exp(d_t), one per token;
- level "sequence": ratio = exp(Σ_t d_t), one per response, on each of its tokens (verl's
  `sequence` level and TRL's `sequence_*` modes: the product of the token ratios; verl's
  geometric mean is not offered);
- mode "truncate":  weight = min(ratio, cap) (truncated IS, TRL's default with cap 2);
- mode "mask":      weight = 1 where 1/cap <= ratio <= cap, else 0 (rejection only, as verl's
  `rollout_rs`: a kept token is not reweighted);
- mode "monitor":   weight = 1 (the metrics only).

Log ratios are clamped to ±20 before any exponential (verl's safety bound), so no weight or
metric overflows; a clamped ratio is far beyond any sensible cap either way.

The correction reweights a mismatch; it cannot repair an engine that samples from other
weights than the trainer's (a failed or partial weight sync), which would train on quietly.
`check_logprob_gap` stops a run instead when the mean |trainer - engine| log-prob per token
exceeds a bound (`MAX_LOGPROB_GAP`, argued there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from algorithms.core._checks import finite_array

CorrectionMode = Literal["monitor", "truncate", "mask"]
CorrectionLevel = Literal["token", "sequence"]
MODES: tuple[str, ...] = ("monitor", "truncate", "mask")
LEVELS: tuple[str, ...] = ("token", "sequence")
LOG_RATIO_BOUND = 20.0
MAX_LOGPROB_GAP = 0.1
"""The default bound on the mean |trainer - engine| log-prob per token, in nats. A healthy
engine is far below it: on one H200, transformers' bfloat16 sampling of a random 740M model
and the trainer's scoring of the same tokens differed by 0.013 nats per token on average
(0.0087 under bfloat16 autocast), 0.11 at most on any token
(docs/results/gpu_check_h200/device_check_lr1e-6.json; vLLM's kernels not measured: the
bound leaves them 7x that mean). An engine holding other weights (none synced, zeroed or misassigned
tensors) moves every token's distribution, by nats for weights unrelated to the trainer's.
Only the mean is bounded: the maximum is one token's, and rounding alone moves a rare
token's log-prob far. Engine weights that are merely stale drift away step by step and
cross the bound later, not at once."""


class LogprobGapError(ValueError):
    """The sampling engine's log-probs are too far from the trainer's; the run stops (a
    ValueError, so `graft` reports it in one line)."""


def check_logprob_gap(
    where: str, step: int, mean: float, largest: float, limit: float | None
) -> None:
    """Raise `LogprobGapError` naming `where`, `step` and the gap when the mean |trainer -
    engine| log-prob per token (`mean`, nats; `largest`: the largest token's) is above
    `limit` (None: no bound). A NaN mean stops too: nothing was compared correctly."""
    if limit is not None and not mean <= limit:
        raise LogprobGapError(
            f"{where}: step {step}: the sampler's log-probs differ from the trainer's by "
            f"{mean:.4g} nats per token on average (largest {largest:.4g}), above "
            f"max_logprob_gap={limit:g}: the engine is not sampling from the trained weights; "
            "stopped, as a weight-sync bug would otherwise train silently"
        )


@dataclass(frozen=True)
class RolloutCorrection:
    """Per-token weights [B, T] (0 off the mask) and the metrics of one batch."""

    weights: np.ndarray
    metrics: dict[str, float]


def correction_weights(
    engine_logp: ArrayLike,
    trainer_logp: ArrayLike,
    mask: ArrayLike,
    mode: CorrectionMode,
    level: CorrectionLevel = "token",
    cap: float = 2.0,
) -> RolloutCorrection:
    """The weights of `mode` at `level` with bound `cap` (> 1), and the metrics.

    Metrics, over the units the level weighs (tokens, or responses with a token):
    `ratio_mean` (the uncapped ratio), `weight_mean` (the weights returned),
    `above_cap_share` and `below_floor_share` (ratio > cap, ratio < 1/cap: what truncate
    caps and what mask drops, whatever the mode). Over tokens: `logp_diff_mean` and
    `logp_diff_max` (|trainer - engine|) and `kl_k3`, the k3 estimate of KL(engine ||
    trainer) from the engine's samples, mean of exp(d) - d - 1 >= 0, computed as expm1(d) - d
    (verl's `mismatch_k3_kl`). `tokens` and `responses` count what was measured.
    """
    engine, trainer, kept = _inputs(engine_logp, trainer_logp, mask)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if not (isinstance(cap, int | float) and math.isfinite(cap) and cap > 1.0):
        raise ValueError(f"cap must be a finite number > 1, got {cap!r}")
    diff = trainer - engine  # 0 off the mask
    rows = kept.any(axis=1)
    # the log ratio of each unit: a token, or a response (rows without tokens weigh nothing)
    units = kept if level == "token" else rows
    unit_log_ratio = diff if level == "token" else diff.sum(axis=1)
    unit_log_ratio = np.clip(unit_log_ratio, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    unit_weights = np.where(units, _weights(unit_log_ratio, mode, cap), 0.0)
    weights = unit_weights if level == "token" else np.where(kept, unit_weights[:, None], 0.0)
    metrics = {
        "ratio_mean": _mean(np.exp(unit_log_ratio), units),
        "weight_mean": _mean(unit_weights, units),
        "above_cap_share": _mean(unit_log_ratio > math.log(cap), units),
        "below_floor_share": _mean(unit_log_ratio < -math.log(cap), units),
        **_mismatch(diff, kept),
        "responses": float(rows.sum()),
    }
    return RolloutCorrection(weights=weights, metrics=metrics)


def _inputs(
    engine_logp: ArrayLike, trainer_logp: ArrayLike, mask: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two log-prob arrays (finite on the mask, 0 off it) and the mask as bool, [B, T]."""
    engine = np.asarray(engine_logp, dtype=np.float64)
    trainer = np.asarray(trainer_logp, dtype=np.float64)
    raw_mask = np.asarray(mask)
    if engine.ndim != 2:
        raise ValueError(f"engine_logp must be [B, T], got shape {engine.shape}")
    for name, array in (("trainer_logp", trainer), ("mask", raw_mask)):
        if array.shape != engine.shape:
            raise ValueError(f"{name} has shape {array.shape}, engine_logp has {engine.shape}")
    if not np.isin(raw_mask, (0, 1)).all():
        raise ValueError("mask must hold only 0 and 1 (1 on response tokens, 0 on padding)")
    kept = raw_mask.astype(bool)
    # padding may hold anything; it is zeroed before any arithmetic
    engine = finite_array(np.where(kept, engine, 0.0), "engine_logp")
    trainer = finite_array(np.where(kept, trainer, 0.0), "trainer_logp")
    return engine, trainer, kept


def _weights(log_ratio: np.ndarray, mode: str, cap: float) -> np.ndarray:
    """The mode's weight of each (clamped) log ratio; mask's band is taken in log space."""
    if mode == "truncate":
        return np.minimum(np.exp(log_ratio), cap)
    if mode == "mask":
        return (np.abs(log_ratio) <= math.log(cap)).astype(np.float64)
    return np.ones_like(log_ratio)


def _mismatch(diff: np.ndarray, kept: np.ndarray) -> dict[str, float]:
    """How far the engine's log-probs are from the trainer's, over the kept tokens."""
    bounded = np.clip(diff, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    # expm1(d) - d, not exp(d) - d - 1: for |d| ~ 1e-11 the latter cancels to -1e-16 < 0, while
    # a faithfully rounded expm1(d) is never below d, so each term is >= 0 exactly
    k3 = np.expm1(bounded) - bounded
    size = np.abs(diff)
    return {
        "logp_diff_mean": _mean(size, kept),
        "logp_diff_max": float(size[kept].max()) if kept.any() else 0.0,
        "kl_k3": _mean(k3, kept),
        "tokens": float(kept.sum()),
    }


def _mean(values: np.ndarray, where: np.ndarray) -> float:
    """Mean of `values` over `where` (0 when empty)."""
    count = int(np.count_nonzero(where))
    return float(np.where(where, values, 0.0).sum() / count) if count else 0.0
