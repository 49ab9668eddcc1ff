"""The Eq.10 surrogate: GRPO equivalence, masking, removal, clipping and per-row variants."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from loss_batches import EPS_HIGH, EPS_LOW, SETTINGS, Batch, batches, surrogate

from algorithms.core import clipped_surrogate, reference_kl, token_nll


def grpo_reference_loss(new: torch.Tensor, old: torch.Tensor, mask, advantages) -> torch.Tensor:
    """DAPO-style GRPO (Eq.2): token-mean of the clipped surrogate over all response tokens."""
    ratio = torch.exp(new - old)
    a = advantages[:, None]
    per_token = torch.minimum(ratio * a, torch.clamp(ratio, 1 - EPS_LOW, 1 + EPS_HIGH) * a)
    return -(per_token * mask).sum() / mask.sum().clamp(min=1)


@SETTINGS
@given(batch=batches)
def test_without_transfer_the_loss_is_grpo(batch: Batch) -> None:
    ones = torch.ones_like(batch.weights)
    new = batch.new_logp()
    output = clipped_surrogate(new, batch.old, batch.mask, batch.advantages, ones)
    reference_new = batch.new_logp()
    reference = grpo_reference_loss(reference_new, batch.old, batch.mask, batch.advantages)
    torch.testing.assert_close(output.loss, reference, rtol=1e-12, atol=1e-12)
    output.loss.backward()
    reference.backward()
    torch.testing.assert_close(new.grad, reference_new.grad, rtol=1e-12, atol=1e-12)
    assert output.pg_tokens == output.own_tokens == batch.mask.sum()
    assert output.peer_tokens == output.clipped_peer == 0


@SETTINGS
@given(batch=batches, extra=st.integers(1, 4), junk=st.sampled_from([0.0, 50.0, float("nan")]))
def test_padding_columns_change_nothing(batch: Batch, extra: int, junk: float) -> None:
    rows = batch.new.shape[0]
    pad = torch.full((rows, extra), junk, dtype=torch.float64)
    new, padded_new = batch.new_logp(), torch.cat([batch.new, pad], 1).requires_grad_(True)
    output = surrogate(batch, new, is_peer=batch.is_peer)
    padded = clipped_surrogate(
        padded_new,
        torch.cat([batch.old, -pad], 1),
        torch.cat([batch.mask, torch.zeros(rows, extra, dtype=torch.float64)], 1),
        batch.advantages,
        batch.weights,
        is_peer=batch.is_peer,
    )
    torch.testing.assert_close(padded.loss, output.loss, rtol=1e-12, atol=1e-12)
    output.loss.backward()
    padded.loss.backward()
    torch.testing.assert_close(padded_new.grad[:, : batch.new.shape[1]], new.grad)
    assert torch.all(padded_new.grad[:, batch.new.shape[1] :] == 0)
    for field in ("pg_tokens", "clipped_own", "clipped_peer", "own_tokens", "peer_tokens"):
        assert getattr(padded, field) == getattr(output, field)


@SETTINGS
@given(batch=batches)
def test_zero_advantage_rows_get_exactly_zero_gradient(batch: Batch) -> None:
    new = batch.new_logp()
    surrogate(batch, new).loss.backward()
    assert torch.all(new.grad[batch.advantages == 0] == 0)


@SETTINGS
@given(batch=batches)
def test_gradient_vanishes_exactly_where_the_clip_is_active(batch: Batch) -> None:
    new = batch.new_logp()
    output = surrogate(batch, new, is_peer=batch.is_peer)
    output.loss.backward()
    ratio = torch.exp(batch.new - batch.old)
    a = batch.advantages[:, None]
    kept = (batch.mask > 0) & (batch.weights > 0)[:, None]
    active = kept & (((a > 0) & (ratio > 1 + EPS_HIGH)) | ((a < 0) & (ratio < 1 - EPS_LOW)))
    assert torch.all(new.grad[active] == 0)
    assert torch.all(new.grad[kept & ~active & (a != 0)] != 0)
    peer = batch.is_peer[:, None]
    assert output.clipped_own == (active & ~peer).sum()
    assert output.clipped_peer == (active & peer).sum()


@SETTINGS
@given(batch=batches)
def test_removed_rows_count_in_neither_numerator_nor_denominator(batch: Batch) -> None:
    new = batch.new_logp()
    output = surrogate(batch, new, is_peer=batch.is_peer, seq_ratio=batch.is_peer)
    output.loss.backward()
    kept = batch.weights > 0
    new_kept = batch.new[kept].clone().requires_grad_(True)
    reduced = clipped_surrogate(
        new_kept,
        batch.old[kept],
        batch.mask[kept],
        batch.advantages[kept],
        batch.weights[kept],
        is_peer=batch.is_peer[kept],
        seq_ratio=batch.is_peer[kept],
    )
    torch.testing.assert_close(output.loss, reduced.loss, rtol=1e-12, atol=1e-12)
    assert output.pg_tokens == batch.mask[kept].sum()
    assert torch.all(new.grad[~kept] == 0)


@SETTINGS
@given(batch=batches)
def test_unclipped_rows_use_the_plain_ratio_term(batch: Batch) -> None:
    output = surrogate(batch, batch.new_logp(), clip=torch.zeros_like(batch.is_peer))
    ratio = torch.exp(batch.new - batch.old)
    kept_mask = batch.mask * (batch.weights > 0)[:, None]
    per_token = batch.weights[:, None] * ratio * batch.advantages[:, None]
    expected = -(per_token * kept_mask).sum() / kept_mask.sum().clamp(min=1)
    torch.testing.assert_close(output.loss, expected, rtol=1e-12, atol=1e-12)
    assert output.clipped_own == output.clipped_peer == 0


@SETTINGS
@given(batch=batches, gamma=st.floats(0.01, 1.0))
def test_luffy_rows_use_the_shaped_probability_term(batch: Batch, gamma: float) -> None:
    luffy = torch.ones_like(batch.is_peer)
    output = surrogate(batch, batch.new_logp(), luffy=luffy, luffy_gamma=gamma)
    prob = torch.exp(batch.new)
    kept_mask = batch.mask * (batch.weights > 0)[:, None]
    per_token = batch.weights[:, None] * prob / (prob + gamma) * batch.advantages[:, None]
    expected = -(per_token * kept_mask).sum() / kept_mask.sum().clamp(min=1)
    torch.testing.assert_close(output.loss, expected, rtol=1e-12, atol=1e-12)
    assert output.clipped_own == output.clipped_peer == 0


@SETTINGS
@given(batch=batches)
def test_sequence_ratio_rows_clip_one_ratio_per_response(batch: Batch) -> None:
    everywhere = torch.ones_like(batch.is_peer)
    output = surrogate(batch, batch.new_logp(), seq_ratio=everywhere)
    kept_mask = batch.mask * (batch.weights > 0)[:, None]
    lengths = kept_mask.sum(1)
    log_ratio = ((batch.new - batch.old) * kept_mask).sum(1) / lengths.clamp(min=1)
    ratio, a = torch.exp(log_ratio), batch.advantages
    per_row = torch.minimum(ratio * a, torch.clamp(ratio, 1 - EPS_LOW, 1 + EPS_HIGH) * a)
    expected = -(batch.weights * per_row * lengths).sum() / lengths.sum().clamp(min=1)
    torch.testing.assert_close(output.loss, expected, rtol=1e-12, atol=1e-12)


def test_no_retained_row_gives_zero_loss_and_zero_gradient() -> None:
    new = torch.tensor([[-1.0, float("nan")], [-2.0, -3.0]], requires_grad=True)
    output = clipped_surrogate(
        new, torch.zeros(2, 2), torch.ones(2, 2), torch.tensor([1.0, -1.0]), torch.zeros(2)
    )
    output.loss.backward()
    assert output.loss.item() == 0 and output.pg_tokens == 0
    assert torch.all(new.grad == 0)


def test_a_tiny_weight_keeps_its_row_in_the_denominator_in_low_precision() -> None:
    # w = 1e-300 (an admitted response with s near 0) is 0 in float32, but the row is
    # retained: 6 tokens in the denominator, only row 0's 3 tokens in the numerator.
    weights = torch.tensor([1.0, 1e-300], dtype=torch.float64)
    for dtype in (torch.float32, torch.bfloat16):
        zeros = torch.zeros(2, 3, dtype=dtype)
        output = clipped_surrogate(zeros, zeros, torch.ones_like(zeros), torch.ones(2), weights)
        assert output.pg_tokens == 6 and output.loss.item() == pytest.approx(-0.5)


@SETTINGS
@given(batch=batches, budget=st.integers(1, 64))
def test_a_constant_normaliser_divides_the_token_sum_by_budget_times_retained_rows(
    batch: Batch, budget: int
) -> None:
    # Dr.GRPO: sum over tokens, divided by a constant per response instead of the token count.
    new, token_mean_new = batch.new_logp(), batch.new_logp()
    output = surrogate(batch, new, is_peer=batch.is_peer, constant_norm=budget)
    token_mean = surrogate(batch, token_mean_new, is_peer=batch.is_peer)
    rows = int((batch.weights > 0).sum())
    assert output.normaliser == rows * budget and token_mean.normaliser == token_mean.pg_tokens
    expected = token_mean.loss * token_mean.pg_tokens / max(rows * budget, 1)
    torch.testing.assert_close(output.loss, expected, rtol=1e-12, atol=1e-12)
    output.loss.backward()
    token_mean.loss.backward()
    scale = float(token_mean.pg_tokens) / max(rows * budget, 1)
    torch.testing.assert_close(new.grad, token_mean_new.grad * scale, rtol=1e-12, atol=1e-12)
    assert output.pg_tokens == token_mean.pg_tokens  # the counts stay token counts


def test_a_constant_normaliser_does_not_depend_on_response_length() -> None:
    # Two rows with the same advantage and ratio 1: the token mean gives each token the same
    # weight 1/7 whatever its row's length; the constant gives every token 1/(2 * 10).
    new = torch.zeros(2, 5, requires_grad=True)
    mask = torch.tensor([[1.0] * 5, [1.0, 1.0, 0.0, 0.0, 0.0]])
    output = clipped_surrogate(
        new, torch.zeros(2, 5), mask, torch.ones(2), torch.ones(2), constant_norm=10
    )
    assert output.loss.item() == pytest.approx(-7 / 20)
    output.loss.backward()
    torch.testing.assert_close(new.grad, -mask / 20)


@SETTINGS
@given(batch=batches, spread=st.floats(0.0, 30.0))
def test_reference_kl_is_verls_clamped_k3_and_never_negative(batch: Batch, spread: float) -> None:
    ref = batch.old * spread  # far from new_logp for a large spread: the clamps act
    kl = reference_kl(batch.new, ref, batch.mask)
    log_ratio = torch.clamp(ref - batch.new, -20, 20)
    expected = torch.clamp(torch.exp(log_ratio) - log_ratio - 1, -10, 10) * batch.mask
    torch.testing.assert_close(kl, expected, rtol=1e-12, atol=1e-12)
    assert torch.all(kl >= 0)


@SETTINGS
@given(batch=batches)
def test_reference_kl_is_zero_at_the_reference_and_positive_away_from_it(batch: Batch) -> None:
    assert torch.all(reference_kl(batch.new, batch.new.clone(), batch.mask) == 0)
    moved = reference_kl(batch.new, batch.new + 0.1, batch.mask)
    assert torch.all(moved[batch.mask > 0] > 0) and torch.all(moved[batch.mask == 0] == 0)


def test_reference_kl_has_no_gradient_on_padding_or_to_the_reference() -> None:
    new = torch.tensor([[-1.0, float("nan")], [-2.0, 50.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, 0.0], [-2.5, float("nan")]], requires_grad=True)
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    kl = reference_kl(new, ref, mask)
    assert torch.isfinite(kl).all()
    kl.sum().backward()
    assert torch.all(new.grad[:, 1] == 0) and torch.all(new.grad[:, 0] != 0)
    assert ref.grad is None


def test_token_nll_is_the_mean_over_masked_tokens() -> None:
    new = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, -9.0, -9.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert token_nll(new, mask).item() == pytest.approx(2.0)
    empty = token_nll(new, torch.zeros_like(mask))
    empty.backward()
    assert empty.item() == 0 and torch.all(new.grad == 0)


@SETTINGS
@given(batch=batches)
def test_token_weights_of_one_change_nothing(batch: Batch) -> None:
    plain, weighted = batch.new_logp(), batch.new_logp()
    without = surrogate(batch, plain, is_peer=batch.is_peer)
    ones = torch.where(batch.mask.bool(), 1.0, float("nan"))  # padding may hold anything
    with_ones = surrogate(batch, weighted, is_peer=batch.is_peer, token_weights=ones)
    assert torch.equal(without.loss, with_ones.loss)
    without.loss.backward()
    with_ones.loss.backward()
    assert torch.equal(plain.grad, weighted.grad)


@SETTINGS
@given(batch=batches, seed=st.integers(0, 2**31 - 1))
def test_token_weights_scale_each_tokens_term_and_leave_the_denominator(
    batch: Batch, seed: int
) -> None:
    generator = torch.Generator().manual_seed(seed)
    token_weights = 2.0 * torch.rand(batch.mask.shape, generator=generator, dtype=torch.float64)
    new = batch.new_logp()
    output = surrogate(batch, new, token_weights=token_weights)
    ratio = torch.exp(new - batch.old)
    a = batch.advantages[:, None]
    term = torch.minimum(ratio * a, torch.clamp(ratio, 1 - EPS_LOW, 1 + EPS_HIGH) * a)
    kept = batch.mask.bool() & (batch.weights > 0)[:, None]
    expected = -(torch.where(kept, term * batch.weights[:, None] * token_weights, 0.0)).sum()
    expected = expected / kept.sum().clamp(min=1)
    torch.testing.assert_close(output.loss, expected, rtol=1e-12, atol=1e-12)
    assert output.pg_tokens == output.normaliser == kept.sum()
    output.loss.backward()
    zero = batch.new_logp()
    surrogate(batch, zero, token_weights=torch.zeros_like(token_weights)).loss.backward()
    assert torch.all(zero.grad == 0)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"token_weights": torch.ones(2, 2)}, ValueError, "token_weights has shape \\(2, 2\\)"),
        ({"token_weights": torch.full((2, 3), -1.0)}, ValueError, "token_weights must be finite"),
        ({"weights": torch.tensor([1.0, -0.5])}, ValueError, "weights must be >= 0"),
        ({"advantages": torch.tensor([1.0])}, ValueError, "advantages must have shape \\(2,\\)"),
        ({"mask": torch.full((2, 3), 0.5)}, ValueError, "mask must hold only 0 and 1"),
        ({"old_logp": torch.zeros(2, 2)}, ValueError, "old_logp has shape \\(2, 2\\)"),
        ({"clip": torch.ones(2)}, TypeError, "clip must be a bool tensor"),
        ({"luffy_gamma": 0.0}, ValueError, "luffy_gamma must be > 0"),
        ({"eps_low": 1.0}, ValueError, "need 0 <= eps_low < 1"),
        ({"constant_norm": -1}, ValueError, "constant_norm must be >= 0"),
        (
            {"luffy": torch.tensor([True, False]), "seq_ratio": torch.tensor([True, False])},
            ValueError,
            "both luffy and seq_ratio",
        ),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(options, error, message) -> None:
    inputs = {
        "new_logp": torch.zeros(2, 3),
        "old_logp": torch.zeros(2, 3),
        "mask": torch.ones(2, 3),
        "advantages": torch.tensor([1.0, -1.0]),
        "weights": torch.ones(2),
    }
    inputs.update(options)
    with pytest.raises(error, match=message):
        clipped_surrogate(**inputs)
