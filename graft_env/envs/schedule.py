"""Which prompts a training step sees: a pure function of (dataset size, seed, step).

Stored-peer replay (GRAFT-SPEC §9) lines a receiver's steps up with a partner run
that trained separately, so the prompt batch at step t must not depend on anything
but the dataset, the seed and t — not on how many times a run was resumed, nor on
any random state consumed elsewhere. Each epoch is one permutation of the dataset
drawn from ``np.random.default_rng([seed, epoch])``; batches are consecutive slices
of the concatenated epochs, so a batch may straddle two epochs.
"""

from __future__ import annotations

import numpy as np


def epoch_permutation(num_items: int, seed: int, epoch: int) -> np.ndarray:
    """The order of the dataset in `epoch` (a permutation of range(num_items))."""
    if num_items <= 0:
        raise ValueError(f"cannot schedule prompts from an empty dataset (num_items={num_items})")
    return np.random.default_rng([seed, epoch]).permutation(num_items)


def prompt_batch_indices(num_items: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    """Dataset indices of the prompts of training step `step` (0-based)."""
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    start = step * batch_size
    positions = np.arange(start, start + batch_size)
    epochs, offsets = np.divmod(positions, num_items)
    out = np.empty(batch_size, dtype=np.int64)
    for epoch in np.unique(epochs):
        here = epochs == epoch
        out[here] = epoch_permutation(num_items, seed, int(epoch))[offsets[here]]
    return out
