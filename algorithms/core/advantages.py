"""Group-relative advantages (GRAFT-SPEC §1 step 3, Eq.1; Dr.GRPO variant §6)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from algorithms.core._checks import check_int, finite_array

ADVANTAGE_SCALES = ("std", "none")


def group_advantages(
    rewards: ArrayLike, *, eps: float = 1e-6, scale: str = "std", ddof: int = 1
) -> np.ndarray:
    """Advantages [P, n] from rewards [P, n], normalised within each prompt's group.

    scale="std" is Eq.1: (r - mean) / (std + eps). scale="none" is Dr.GRPO: r - mean,
    no division, so groups with a small spread are not blown up.

    A group whose rewards are all equal gets exactly 0.0: such a group carries no
    learning signal, and floating-point residue from `r - mean` (the mean of n
    equal floats need not equal them exactly) must not leak into the loss.

    ddof=1, the sample (Bessel-corrected) std: the paper writes std(R) without saying
    which, and it trained with verl, whose `compute_grpo_outcome_advantage` divides by
    `torch.std`, the sample std. ddof=0 (population std) gives advantages sqrt(n/(n-1))
    times larger (1.069x at n = 8). A group of one is constant, so it gets 0 whatever
    ddof is.
    """
    r = finite_array(rewards, "rewards")
    if r.ndim != 2:
        raise ValueError(f"rewards must be [prompts, n], got shape {r.shape}")
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"scale must be one of {ADVANTAGE_SCALES}, got {scale!r}")
    ddof = check_int(ddof, "ddof", minimum=0)
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    n = r.shape[1]
    if n == 0:
        raise ValueError("rewards has no responses per prompt (shape [P, 0])")
    if scale == "std" and ddof >= n > 1:
        raise ValueError(f"ddof={ddof} needs groups larger than n={n}")

    advantages = np.zeros_like(r)
    varied = ~(r == r[:, :1]).all(axis=1)
    if not varied.any():  # also every group of one: no std (of 0 rows) to compute
        return advantages
    groups = r[varied]
    centred = groups - groups.mean(axis=1, keepdims=True)
    if scale == "std":
        centred = centred / (groups.std(axis=1, ddof=ddof, keepdims=True) + eps)
    advantages[varied] = centred
    return advantages
