"""Eq.10's pure terms one at a time: the clipped PPO term and its per-row bounds, the LUFFY
term, the sequence ratio and the token-mean aggregation (GRAFT-SPEC §5, §7)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from loss_batches import EPS_HIGH, EPS_LOW, SETTINGS, Batch, batches, surrogate

from algorithms.core import (
    agg_loss,
    clip_active,
    clip_bounds,
    clipped_surrogate,
    log_ratio,
    luffy_term,
    ppo_clip_term,
)

NAMES = ("eps_low", "eps_high")
bounds = st.tuples(st.floats(0.0, 0.99), st.floats(0.0, 1.0))


def row_bounds(batch: Batch, eps_low: float, eps_high: float) -> tuple[torch.Tensor, ...]:
    rows = batch.new.shape[0]
    low = torch.full((rows, 1), 1 - eps_low, dtype=torch.float64)
    return low, torch.full((rows, 1), 1 + eps_high, dtype=torch.float64)


@SETTINGS
@given(batch=batches, eps=bounds)
def test_the_clipped_term_is_the_plain_one_inside_the_bounds_and_never_above_it(
    batch: Batch, eps: tuple[float, float]
) -> None:
    ratio = torch.exp(batch.new - batch.old)
    a = batch.advantages[:, None]
    low, high = row_bounds(batch, *eps)
    term = ppo_clip_term(ratio, a, low, high)
    # The term is ρa, except where the clip is active: there the bound reached, times a.
    active = ((a > 0) & (ratio > high)) | ((a < 0) & (ratio < low))
    assert torch.equal(term[~active], (ratio * a)[~active])
    assert torch.equal(term[active], (torch.where(a > 0, high, low) * a).expand_as(term)[active])
    assert torch.all(term <= ratio * a)  # Eq.10's min: a pessimistic bound on the plain term


@SETTINGS
@given(batch=batches, eps=bounds)
def test_the_clip_is_active_exactly_where_the_clipped_term_has_no_gradient(
    batch: Batch, eps: tuple[float, float]
) -> None:
    ratio = torch.exp(batch.new - batch.old).requires_grad_(True)
    a = batch.advantages[:, None]
    low, high = row_bounds(batch, *eps)
    ppo_clip_term(ratio, a, low, high).sum().backward()
    active = clip_active(ratio.detach(), a, low, high)
    on_a_bound = (ratio == low) | (ratio == high)
    assert torch.all(ratio.grad[active] == 0)
    assert torch.all(ratio.grad[~active & ~on_a_bound & (a != 0)] != 0)


def test_a_ratio_on_a_bound_is_not_clipped_and_keeps_its_gradient() -> None:
    low, high = torch.tensor([[0.8]]), torch.tensor([[1.28]])
    ratio = torch.tensor([[0.8, 1.28, 0.8, 1.28]], requires_grad=True)
    a = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    assert not clip_active(ratio.detach(), a, low, high).any()
    ppo_clip_term(ratio, a, low, high).sum().backward()
    assert torch.equal(ratio.grad, a)


@SETTINGS
@given(batch=batches)
def test_an_unclipped_row_has_infinite_bounds_and_the_plain_term(batch: Batch) -> None:
    rows = batch.new.shape[0]
    clip = batch.is_peer  # clip on peer rows only: either kind of row appears
    low, high = clip_bounds(EPS_LOW, EPS_HIGH, clip, batch.new)
    assert low.shape == high.shape == (rows, 1)
    assert torch.all(low[clip] == 1 - EPS_LOW) and torch.all(high[clip] == 1 + EPS_HIGH)
    assert torch.all(low[~clip] == -math.inf) and torch.all(high[~clip] == math.inf)
    ratio = torch.exp(batch.new - batch.old)
    a = batch.advantages[:, None]
    assert torch.equal(ppo_clip_term(ratio, a, low, high)[~clip], (ratio * a)[~clip])
    assert not clip_active(ratio, a, low, high)[~clip].any()


@SETTINGS
@given(batch=batches, eps=bounds)
def test_per_row_bounds_equal_to_the_global_ones_give_the_same_loss_bit_for_bit(
    batch: Batch, eps: tuple[float, float]
) -> None:
    eps_low, eps_high = eps
    per_row = {name: torch.full_like(batch.weights, v) for name, v in zip(NAMES, eps, strict=True)}
    new, global_new = batch.new_logp(), batch.new_logp()
    output = surrogate(batch, new, is_peer=batch.is_peer, **per_row)
    reference = surrogate(
        batch, global_new, is_peer=batch.is_peer, eps_low=eps_low, eps_high=eps_high
    )
    assert torch.equal(output.loss, reference.loss)
    output.loss.backward()
    reference.loss.backward()
    assert torch.equal(new.grad, global_new.grad)
    assert (output.clipped_own, output.clipped_peer) == (
        reference.clipped_own,
        reference.clipped_peer,
    )


@SETTINGS
@given(batch=batches, peer_eps=bounds)
def test_peer_rows_with_their_own_bounds_are_the_two_row_sets_recombined_by_token_count(
    batch: Batch, peer_eps: tuple[float, float]
) -> None:
    # HACPO's separate peer range: one pass with per-row bounds is the own rows' Eq.10 and
    # the peer rows' Eq.10, each with its range, weighted by their retained token counts.
    peer = batch.is_peer
    eps_low = torch.where(peer, peer_eps[0], torch.full_like(batch.weights, EPS_LOW))
    eps_high = torch.where(peer, peer_eps[1], torch.full_like(batch.weights, EPS_HIGH))
    new = batch.new_logp()
    output = surrogate(batch, new, is_peer=peer, eps_low=eps_low, eps_high=eps_high)

    def rows(chosen: torch.Tensor, **eps: float):
        weights = torch.where(chosen, batch.weights, 0.0)
        return clipped_surrogate(
            new, batch.old, batch.mask, batch.advantages, weights, is_peer=peer, **eps
        )

    own, peers = rows(~peer), rows(peer, **dict(zip(NAMES, peer_eps, strict=True)))
    tokens = max(int(own.pg_tokens + peers.pg_tokens), 1)
    recombined = (own.loss * own.pg_tokens + peers.loss * peers.pg_tokens) / tokens
    torch.testing.assert_close(output.loss, recombined, rtol=1e-12, atol=1e-12)
    assert (output.clipped_own, output.clipped_peer) == (own.clipped_own, peers.clipped_peer)


@SETTINGS
@given(batch=batches, junk=st.sampled_from([50.0, float("nan")]))
def test_a_sequence_ratio_is_the_geometric_mean_of_its_token_ratios(
    batch: Batch, junk: float
) -> None:
    kept = batch.mask > 0
    new = torch.where(kept, batch.new, junk)  # padding must not reach the ratio
    everywhere = torch.ones_like(batch.is_peer)
    sequence = log_ratio(new, batch.old, kept, everywhere)
    token = log_ratio(new, batch.old, kept, ~everywhere)
    for j in range(new.shape[0]):
        ratios = [math.exp(new[j, t] - batch.old[j, t]) for t in range(new.shape[1]) if kept[j, t]]
        if ratios:
            geometric = math.prod(ratios) ** (1 / len(ratios))
            assert torch.exp(sequence[j, kept[j]]).tolist() == pytest.approx(
                [geometric] * len(ratios)
            )
            assert torch.exp(token[j, kept[j]]).tolist() == pytest.approx(ratios)
    assert torch.all(token[~kept] == 0)


@SETTINGS
@given(batch=batches, gamma=st.floats(0.01, 1.0))
def test_the_luffy_term_shapes_the_probability_and_ignores_the_behaviour_policy(
    batch: Batch, gamma: float
) -> None:
    # f(π) = π / (π + γ) with the behaviour probability taken as 1: no old_logp, no clip,
    # and df/dlog π = γπ / (π + γ)^2, so every token with a != 0 gets a gradient.
    kept = batch.mask > 0
    new = batch.new_logp()
    a = batch.advantages[:, None]
    term = luffy_term(new, kept, a, gamma)
    prob = torch.exp(batch.new)
    torch.testing.assert_close(term[kept], (prob / (prob + gamma) * a)[kept])
    term.sum().backward()
    expected_grad = torch.where(kept, gamma * prob / (prob + gamma) ** 2 * a, 0.0)
    torch.testing.assert_close(new.grad, expected_grad)


@SETTINGS
@given(batch=batches, junk=st.sampled_from([0.0, 50.0, float("nan")]))
def test_token_mean_aggregation_is_the_masked_mean(batch: Batch, junk: float) -> None:
    kept = batch.mask > 0
    values = torch.where(kept, batch.new, junk).requires_grad_(True)
    loss = agg_loss(values, kept, kept.sum())
    expected = batch.new[kept].mean() if kept.any() else torch.zeros((), dtype=torch.float64)
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    loss.backward()
    assert torch.all(values.grad[~kept] == 0)
    torch.testing.assert_close(
        values.grad[kept], torch.full_like(batch.new[kept], 1 / max(int(kept.sum()), 1))
    )


@SETTINGS
@given(batch=batches, normaliser=st.integers(1, 4096))
def test_aggregation_by_a_constant_is_the_masked_sum_over_it(batch: Batch, normaliser: int) -> None:
    kept = batch.mask > 0
    loss = agg_loss(batch.new, kept, torch.tensor(normaliser))
    torch.testing.assert_close(loss, batch.new[kept].sum() / normaliser, rtol=1e-12, atol=1e-12)
