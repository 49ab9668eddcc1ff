"""Random float64 minibatches and the surrogate call shared by the loss tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import settings
from hypothesis import strategies as st

from algorithms.core import clipped_surrogate

SETTINGS = settings(max_examples=100, deadline=None)
EPS_LOW, EPS_HIGH = 0.2, 0.28


@dataclass
class Batch:
    """A random minibatch in float64; `new_logp()` gives a fresh leaf to take gradients of."""

    new: torch.Tensor
    old: torch.Tensor
    mask: torch.Tensor
    advantages: torch.Tensor
    weights: torch.Tensor
    is_peer: torch.Tensor

    def new_logp(self) -> torch.Tensor:
        return self.new.clone().requires_grad_(True)


def make_batch(seed: int, rows: int, cols: int) -> Batch:
    generator = torch.Generator().manual_seed(seed)

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator, dtype=torch.float64)

    old = -3 * uniform(rows, cols)
    new = old + 0.6 * (uniform(rows, cols) - 0.5)  # ratios around [0.74, 1.35]: some clipped
    lengths = torch.randint(0, cols + 1, (rows,), generator=generator)
    mask = (torch.arange(cols)[None, :] < lengths[:, None]).to(torch.float64)
    advantages = torch.where(uniform(rows) < 0.2, 0.0, 4 * uniform(rows) - 2)
    weights = torch.where(uniform(rows) < 0.3, 0.0, uniform(rows) + 0.01)
    return Batch(new, old, mask, advantages, weights, uniform(rows) < 0.5)


batches = st.builds(
    make_batch, seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 6), cols=st.integers(1, 8)
)


def surrogate(batch: Batch, new_logp: torch.Tensor, **options):
    return clipped_surrogate(
        new_logp, batch.old, batch.mask, batch.advantages, batch.weights, **options
    )
