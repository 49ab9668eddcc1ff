"""Compatibility weights for transferred responses (GRAFT-SPEC §4, Eq.6-8; §7 controls)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from algorithms.core._checks import check_int, check_rng, finite_array

LOGLIK_MODES = ("token", "char")


def normalised_loglik(token_logprobs: ArrayLike, text: str, mode: str = "token") -> float:
    """Length-normalised log-likelihood ℓ̄ of one response.

    "token" is the paper's mean token log-prob. "char" divides the summed
    log-prob by the number of characters of `text` instead: a tokenizer-neutral
    option, because per-token means are not comparable when one tokenizer cuts
    the same text much finer than the other (each fine token is easier to guess).
    """
    logprobs = finite_array(token_logprobs, "token_logprobs")
    if logprobs.ndim != 1:
        raise ValueError(f"token_logprobs must be 1-D, got shape {logprobs.shape}")
    if logprobs.size == 0:
        raise ValueError("token_logprobs is empty: a response with no tokens has no likelihood")
    if mode == "token":
        return float(logprobs.mean())
    if mode == "char":
        if len(text) == 0:
            raise ValueError("text is empty: mode='char' needs at least one character")
        return float(logprobs.sum() / len(text))
    raise ValueError(f"mode must be one of {LOGLIK_MODES}, got {mode!r}")


def compatibility_scores(receiver_mean_logp: ArrayLike, source_mean_logp: ArrayLike) -> np.ndarray:
    """s = exp(ℓ̄_R - ℓ̄_S) (Eq.6-7): how plausible the response is for the receiver vs its author.

    A very large difference gives s = inf rather than an overflow warning; the
    weight caps it at 1 anyway.
    """
    receiver = finite_array(receiver_mean_logp, "receiver_mean_logp")
    source = finite_array(source_mean_logp, "source_mean_logp")
    if receiver.shape != source.shape:
        raise ValueError(
            f"receiver_mean_logp has shape {receiver.shape} but source_mean_logp has "
            f"shape {source.shape}; they must score the same responses"
        )
    with np.errstate(over="ignore"):
        return np.asarray(np.exp(receiver - source))


def admitted_by_floor(scores: ArrayLike, delta: float) -> np.ndarray:
    """The floor test 1[s > δ] of Eq.8 as a bool array; δ = 0 admits every response.

    s = exp(ℓ̄_R - ℓ̄_S) is positive, so with δ = 0 the indicator is 1 for every
    response. In floating point s can underflow to exactly 0.0 (ℓ̄_R - ℓ̄_S below
    about -745), and `0.0 > 0` would then silently remove a response the spec keeps;
    hence the test is `s > δ` only when δ > 0 [project choice].
    """
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    values = np.asarray(scores, dtype=np.float64)
    return values > delta if delta > 0 else np.ones(values.shape, dtype=bool)


def admitted_weights(scores: ArrayLike) -> np.ndarray:
    """min(s, 1) for admitted responses, never exactly 0.

    A weight of 0 means "removed" everywhere downstream (numerator and denominator),
    so an admitted response whose s underflowed to 0.0 gets the smallest positive
    normal double instead: it adds nothing measurable to the numerator of Eq.10 but
    keeps its tokens in the denominator, as w = min(s, 1) with the true s > 0 would.
    """
    values = np.asarray(scores, dtype=np.float64)
    return np.maximum(np.minimum(values, 1.0), np.finfo(np.float64).tiny)


def compatibility_weights(scores: ArrayLike, delta: float) -> np.ndarray:
    """w = 1[s > δ] · min(s, 1) (Eq.8) from compatibility scores s (`compatibility_scores`),
    so w ∈ {0} ∪ (δ, 1].

    The cap keeps a peer response from outweighing an on-policy one; the floor δ
    removes responses the receiver finds too implausible to learn from (w = 0 means
    the response is dropped from numerator and denominator of the loss). With δ = 0
    every response is kept (`admitted_by_floor`, `admitted_weights`), even one whose
    s underflowed to 0.0.
    """
    return np.where(admitted_by_floor(scores, delta), admitted_weights(scores), 0.0)


def random_admission(scores: ArrayLike, count: int, rng: np.random.Generator) -> np.ndarray:
    """graft-random-admission: `count` responses chosen uniformly get w = min(s, 1), the rest 0.

    The control for the floor: the same number of admitted responses, chosen
    without looking at their scores. `scores` may be one transferred group [n] or
    every group one direction moved this step [G, n]: the draw is uniform over all
    of them, so the paper's per-direction count (App. F) lets one group get more
    than the floor would admit there and another fewer. An admitted response keeps
    a positive weight even if its s underflowed to 0.0 (`admitted_weights`).
    Returns weights with the shape of `scores`.
    """
    values = np.asarray(scores, dtype=np.float64)
    bad = np.isnan(values) | (values < 0)
    if bad.any():
        position = [int(i) for i in np.argwhere(bad)[0]]
        raise ValueError(f"scores{position} = {values[tuple(position)]} is not a score >= 0")
    count = check_int(count, "count", minimum=0)
    rng = check_rng(rng)
    if count > values.size:
        raise ValueError(f"count={count} exceeds the {values.size} scored responses")
    admitted = rng.choice(values.size, size=count, replace=False)
    weights = np.zeros(values.shape, dtype=np.float64)
    weights.flat[admitted] = admitted_weights(values.flat[admitted])
    return weights
