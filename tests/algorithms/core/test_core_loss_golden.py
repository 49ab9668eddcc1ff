"""Golden test: the tensor loss against a loop-by-loop float transcription of Eq.10."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from algorithms.core import clipped_surrogate

EPS_LOW, EPS_HIGH = 0.2, 0.28
PADDING = 7.0  # a value no real log-prob takes: it must not reach the loss


@dataclass(frozen=True)
class Row:
    """One response: its token log-probs under π_θ and π_old, and its constants."""

    new: list[float]
    old: list[float]
    advantage: float
    weight: float
    is_peer: bool
    clip: bool = True


ROWS = [
    # own, positive advantage; token 0 has ρ = e^0.4 > 1.28: clipped.
    Row([-0.5, -1.2, -0.1], [-0.9, -1.0, -0.15], 0.8, 1.0, False),
    # peer, negative advantage, w = 0.9; tokens 0 and 3 have ρ < 0.8: clipped.
    Row([-2.0, -0.3, -1.0, -0.7], [-1.7, -0.5, -1.0, -0.2], -0.5, 0.9, True),
    # peer removed by the floor (w = 0): no part of the loss.
    Row([-0.1, -0.2, -0.3], [-1.0, -1.0, -1.0], 1.2, 0.0, True),
    # own zero-advantage group member: counts in the denominator only.
    Row([-0.4, -0.6], [-0.5, -0.5], 0.0, 1.0, False),
    # peer without clipping (graft-no-clip): ρ = e^0.4 enters unclipped.
    Row([-0.2, -0.9], [-0.6, -1.0], 1.1, 0.85, True, clip=False),
]


def eq10_by_hand(rows: list[Row]) -> tuple[float, int, int, int]:
    """-J of Eq.10 written as plain loops, with the clipped-token counts for own and peer."""
    numerator = 0.0
    retained_tokens = 0
    clipped_own = clipped_peer = 0
    for row in rows:
        if row.weight == 0:
            continue
        retained_tokens += len(row.new)
        for new, old in zip(row.new, row.old, strict=True):
            rho = math.exp(new - old)
            if row.clip:
                clipped_rho = min(max(rho, 1 - EPS_LOW), 1 + EPS_HIGH)
                term = min(rho * row.advantage, clipped_rho * row.advantage)
                active = (row.advantage > 0 and rho > 1 + EPS_HIGH) or (
                    row.advantage < 0 and rho < 1 - EPS_LOW
                )
                if active and row.is_peer:
                    clipped_peer += 1
                elif active:
                    clipped_own += 1
            else:
                term = rho * row.advantage
            numerator += row.weight * term
    return -numerator / retained_tokens, retained_tokens, clipped_own, clipped_peer


def padded(values: list[list[float]], width: int) -> torch.Tensor:
    return torch.tensor([row + [PADDING] * (width - len(row)) for row in values])


def test_loss_matches_the_hand_transcription_of_eq10() -> None:
    width = max(len(row.new) for row in ROWS) + 1
    output = clipped_surrogate(
        padded([row.new for row in ROWS], width),
        padded([row.old for row in ROWS], width),
        torch.tensor([[float(t < len(row.new)) for t in range(width)] for row in ROWS]),
        torch.tensor([row.advantage for row in ROWS]),
        torch.tensor([row.weight for row in ROWS]),
        clip=torch.tensor([row.clip for row in ROWS]),
        is_peer=torch.tensor([row.is_peer for row in ROWS]),
    )
    loss, tokens, clipped_own, clipped_peer = eq10_by_hand(ROWS)
    assert output.loss.item() == pytest.approx(loss, abs=1e-6)
    assert (output.pg_tokens.item(), output.clipped_own.item(), output.clipped_peer.item()) == (
        tokens,
        clipped_own,
        clipped_peer,
    )
    # The counts the comments above promise, so the batch really exercises each case.
    assert (tokens, clipped_own, clipped_peer) == (11, 1, 2)
    assert output.own_tokens.item() == 5 and output.peer_tokens.item() == 6
