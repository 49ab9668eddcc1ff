"""Right-padded tensors from a list of `TrainSequence`s, for the surrogate loss.

The loop computes the receiver's new log-probs for a minibatch as [B, T], each row
aligned to that sequence's response tokens and right-padded to T. This module
builds the matching old log-probs, mask and per-row values in the same layout, so
`Algorithm.loss` can hand everything to `clipped_surrogate` in one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from graft_env.types import TrainSequence


@dataclass
class CollatedSequences:
    """Per-token [B, T] and per-row [B] tensors of one minibatch."""

    old_logp: torch.Tensor
    mask: torch.Tensor
    advantages: torch.Tensor
    # Policy-gradient weight, 0 for rows with policy_gradient=False; float64 whatever
    # new_logp's dtype, so a tiny admitted weight stays > 0 (retained) in the loss.
    weights: torch.Tensor
    clip: torch.Tensor
    is_peer: torch.Tensor
    nll: torch.Tensor
    # The rollout correction's per-token weights [B, T] (1 on rows without any); None when
    # no row has them, so the loss is computed exactly as without the correction.
    token_weights: torch.Tensor | None = None


def collate(sequences: Sequence[TrainSequence], new_logp: torch.Tensor) -> CollatedSequences:
    """Tensors matching `new_logp` [B, T] (dtype and device) for `sequences` (length B)."""
    if new_logp.ndim != 2:
        raise ValueError(f"new_logp must be [B, T], got shape {tuple(new_logp.shape)}")
    rows, width = new_logp.shape
    if rows != len(sequences):
        raise ValueError(f"new_logp has {rows} rows for {len(sequences)} sequences")
    old_logp = np.zeros((rows, width))
    mask = np.zeros((rows, width))
    weighted = any(seq.rollout_weights is not None for seq in sequences)
    token_weights = np.ones((rows, width)) if weighted else None
    for j, seq in enumerate(sequences):
        length = len(seq.response_token_ids)
        old = np.asarray(seq.old_logprobs, dtype=np.float64)
        if length == 0 or old.shape != (length,):
            raise ValueError(
                f"sequence {j} (prompt {seq.prompt_index}, source {seq.source!r}) has {length} "
                f"tokens and old_logprobs of shape {old.shape}; need the same non-zero length"
            )
        if length > width:
            raise ValueError(f"sequence {j} has {length} tokens but new_logp has only {width}")
        old_logp[j, :length] = old
        mask[j, :length] = 1.0
        if seq.rollout_weights is not None:
            token_weights[j, :length] = _row_weights(seq, j, length)

    def rows_of(values: list, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=new_logp.device).reshape(rows)

    float_type = new_logp.dtype

    def tokens_of(values: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(values, dtype=float_type, device=new_logp.device)

    return CollatedSequences(
        old_logp=tokens_of(old_logp),
        mask=tokens_of(mask),
        advantages=rows_of([s.advantage for s in sequences], float_type),
        weights=rows_of([s.weight if s.policy_gradient else 0.0 for s in sequences], torch.float64),
        clip=rows_of([s.clip for s in sequences], torch.bool),
        is_peer=rows_of([s.is_peer for s in sequences], torch.bool),
        nll=rows_of([s.nll for s in sequences], torch.bool),
        token_weights=None if token_weights is None else tokens_of(token_weights),
    )


def _row_weights(seq: TrainSequence, j: int, length: int) -> np.ndarray:
    """A sequence's rollout-correction weights, one per response token."""
    weights = np.asarray(seq.rollout_weights, dtype=np.float64)
    if weights.shape != (length,):
        raise ValueError(
            f"sequence {j} (prompt {seq.prompt_index}, source {seq.source!r}) has {length} "
            f"tokens and rollout_weights of shape {weights.shape}"
        )
    return weights
