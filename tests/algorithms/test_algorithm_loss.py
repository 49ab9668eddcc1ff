"""Algorithm.loss against `clipped_surrogate` on hand-collated tensors (GRAFT-SPEC §5, §7)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import algorithms
from algorithms.core import clipped_surrogate, reference_kl
from algorithms.testing import PAIR, TextScorer, make_rollouts, run_exchange

EXTRA_PADDING = 2


def batch_sequences(name: str, **options):
    """All of receiver A's sequences for `name`, with a scorer that removes one response."""
    texts = make_rollouts("B", PAIR["B"]).texts[0]
    scorer = TextScorer({texts[0]: -2.0, texts[1]: -1.1, texts[3]: -0.7})
    algo, rollouts, transfers, _ = run_exchange(name, PAIR, scorer, **options)
    batches, _ = algo.build_batches(rollouts, transfers, ["A", "B"], np.random.default_rng(0))
    return algo, batches["A"].sequences


def new_logp_for(sequences, seed: int = 0, shift: float = 0.3) -> torch.Tensor:
    """old + noise on response tokens; junk (+5) on padding, which must be ignored."""
    width = max(len(s.response_token_ids) for s in sequences) + EXTRA_PADDING
    generator = torch.Generator().manual_seed(seed)
    values = torch.full((len(sequences), width), 5.0, dtype=torch.float64)
    for j, s in enumerate(sequences):
        length = len(s.response_token_ids)
        noise = shift * torch.randn(length, generator=generator, dtype=torch.float64)
        values[j, :length] = torch.as_tensor(s.old_logprobs) + noise
    return values.requires_grad_(True)


def hand_collate(sequences, width: int) -> dict[str, torch.Tensor]:
    rows = len(sequences)
    old, mask = torch.zeros(rows, width, dtype=torch.float64), torch.zeros(rows, width)
    for j, s in enumerate(sequences):
        length = len(s.old_logprobs)
        old[j, :length] = torch.as_tensor(s.old_logprobs)
        mask[j, :length] = 1.0
    return {
        "old_logp": old,
        "mask": mask.double(),
        "advantages": torch.tensor([s.advantage for s in sequences], dtype=torch.float64),
        "weights": torch.tensor(
            [s.weight if s.policy_gradient else 0.0 for s in sequences], dtype=torch.float64
        ),
        "clip": torch.tensor([s.clip for s in sequences]),
        "is_peer": torch.tensor([s.is_peer for s in sequences]),
    }


def reference(new_logp, sequences, rows=None, **flags) -> torch.Tensor:
    """clipped_surrogate on the hand-collated rows `rows` (all by default); `flags` override."""
    rows = list(range(len(sequences))) if rows is None else rows
    chosen = [sequences[j] for j in rows]
    t = hand_collate(chosen, new_logp.shape[1])
    options = {"clip": t["clip"], "is_peer": t["is_peer"], **flags}
    return clipped_surrogate(
        new_logp[rows], t["old_logp"], t["mask"], t["advantages"], t["weights"], **options
    )


def assert_same_loss_and_gradient(algo, sequences, expected_fn, **loss_kwargs) -> dict[str, float]:
    new_logp = new_logp_for(sequences)
    loss, stats = algo.loss(new_logp, sequences, **loss_kwargs)
    (grad,) = torch.autograd.grad(loss, new_logp)
    same_logp = new_logp.detach().clone().requires_grad_(True)
    expected = expected_fn(same_logp)
    (expected_grad,) = torch.autograd.grad(expected, same_logp)
    assert loss.item() == pytest.approx(expected.item(), abs=1e-12)
    torch.testing.assert_close(grad, expected_grad)
    return stats


def test_graft_loss_is_clipped_surrogate_on_the_collated_batch() -> None:
    algo, sequences = batch_sequences("graft")
    assert any(s.is_peer for s in sequences) and any(s.weight < 1 for s in sequences)
    stats = assert_same_loss_and_gradient(
        algo, sequences, lambda logp: reference(logp, sequences).loss
    )
    out = reference(new_logp_for(sequences), sequences)
    assert stats["pg_tokens"] == out.pg_tokens.item()
    assert stats["clipped_peer"] == out.clipped_peer.item()
    assert stats["peer_tokens"] == out.peer_tokens.item()


def test_sequence_ratio_and_luffy_rows_follow_the_config() -> None:
    algo, seq = batch_sequences("graft-seq-ratio")
    rows = len(seq)
    assert_same_loss_and_gradient(
        algo, seq, lambda logp: reference(logp, seq, seq_ratio=torch.ones(rows, dtype=bool)).loss
    )
    algo, seq = batch_sequences("luffy")
    luffy_rows = torch.tensor([s.is_peer for s in seq])
    assert_same_loss_and_gradient(
        algo, seq, lambda logp: reference(logp, seq, luffy=luffy_rows).loss
    )


def test_separate_peer_clip_range_recombines_by_token_counts() -> None:
    algo, seq = batch_sequences("graft", peer_eps_low=0.1, peer_eps_high=0.0)
    own = [j for j, s in enumerate(seq) if not s.is_peer]
    peer = [j for j, s in enumerate(seq) if s.is_peer]

    def expected(logp: torch.Tensor) -> torch.Tensor:
        own_out = reference(logp, seq, own)
        peer_out = reference(logp, seq, peer, eps_low=0.1, eps_high=0.0)
        tokens = own_out.pg_tokens + peer_out.pg_tokens
        return (own_out.loss * own_out.pg_tokens + peer_out.loss * peer_out.pg_tokens) / tokens

    assert_same_loss_and_gradient(algo, seq, expected)


def test_sgt_adds_the_nll_of_peer_rows_to_the_own_policy_gradient() -> None:
    algo, seq = batch_sequences("sgt")
    own = [j for j, s in enumerate(seq) if not s.is_peer]
    peer = [j for j, s in enumerate(seq) if s.is_peer]

    def expected(logp: torch.Tensor) -> torch.Tensor:
        tokens = [logp[j, t] for j in peer for t in range(len(seq[j].response_token_ids))]
        nll = -torch.stack(tokens).mean()
        return reference(logp, seq, own).loss + 0.1 * nll

    stats = assert_same_loss_and_gradient(algo, seq, expected)
    assert stats["peer_tokens"] == 0 and stats["nll_tokens"] > 0


def test_clip_statistics_count_own_and_peer_tokens_separately() -> None:
    algo, seq = batch_sequences("graft")
    pushed = new_logp_for(seq, shift=0.0).detach() + 1.0  # ratio e > 1 + eps_high everywhere
    _, stats = algo.loss(pushed, seq)
    positive_own = sum(len(s.old_logprobs) for s in seq if not s.is_peer and s.advantage > 0)
    positive_peer = sum(len(s.old_logprobs) for s in seq if s.is_peer and s.advantage > 0)
    assert positive_own > 0 and positive_peer > 0
    assert stats["clipped_own"] == positive_own
    assert stats["clipped_peer"] == positive_peer
    assert stats["peer_tokens"] == sum(len(s.old_logprobs) for s in seq if s.is_peer)


def test_no_clip_leaves_peer_rows_unclipped_and_differs_from_graft_outside_the_band() -> None:
    algo, seq = batch_sequences("graft-no-clip")
    graft, graft_seq = batch_sequences("graft")
    assert [s.clip for s in seq] == [not s.is_peer for s in seq]
    peer_rows = torch.tensor([s.is_peer for s in seq])
    pushed = new_logp_for(seq, shift=0.0).detach() + 0.5  # every ratio e^0.5 > 1 + eps_high
    pushed = torch.where(peer_rows[:, None], pushed, new_logp_for(seq).detach())
    loss, stats = algo.loss(pushed, seq)
    expected = reference(pushed, seq, clip=~peer_rows).loss
    assert loss.item() == pytest.approx(expected.item(), abs=1e-12)
    assert stats["clipped_peer"] == 0
    graft_loss, graft_stats = graft.loss(pushed, graft_seq)
    assert graft_stats["clipped_peer"] > 0
    assert graft_loss.item() > loss.item() + 1e-3  # the unclipped e^0.5 a pulls further


def test_dr_grpo_divides_the_token_sum_by_its_budget_per_retained_response() -> None:
    algo, seq = batch_sequences("graft", constant_norm=256)
    assert_same_loss_and_gradient(
        algo, seq, lambda logp: reference(logp, seq, constant_norm=256).loss
    )
    # With a separate peer clip range the two row sets recombine by their normalisers.
    algo, seq = batch_sequences("graft", constant_norm=256, peer_eps_high=0.0)
    own = [j for j, s in enumerate(seq) if not s.is_peer]
    peer = [j for j, s in enumerate(seq) if s.is_peer]
    rows = sum(s.weight > 0 for s in seq)

    def expected(logp: torch.Tensor) -> torch.Tensor:
        own_out = reference(logp, seq, own, constant_norm=256)
        peer_out = reference(logp, seq, peer, constant_norm=256, eps_high=0.0)
        return (own_out.loss * len(own) + peer_out.loss * (rows - len(own))) / rows

    assert_same_loss_and_gradient(algo, seq, expected)


def test_the_kl_term_is_the_k3_token_mean_to_the_reference_times_kl_coef() -> None:
    algo, seq = batch_sequences("graft", kl_coef=0.05)
    assert algo.needs_reference and not algorithms.make("graft").needs_reference
    ref = new_logp_for(seq, seed=7).detach()
    retained = torch.tensor([s.weight > 0 and s.policy_gradient for s in seq])
    width = ref.shape[1]
    mask = hand_collate(seq, width)["mask"] * retained[:, None]

    def expected(logp: torch.Tensor) -> torch.Tensor:
        kl = reference_kl(logp, ref, mask).sum() / mask.sum()
        return reference(logp, seq).loss + 0.05 * kl

    stats = assert_same_loss_and_gradient(algo, seq, expected, ref_logp=ref)
    kl = reference_kl(new_logp_for(seq).detach(), ref, mask).sum() / mask.sum()
    assert stats["kl"] == pytest.approx(float(kl))
    assert stats["kl"] > 0
    _, at_reference = algo.loss(ref.clone(), seq, ref_logp=ref)
    assert at_reference["kl"] == 0.0


def test_kl_needs_reference_log_probs_and_nothing_else_takes_them() -> None:
    algo, seq = batch_sequences("grpo-kl")
    with pytest.raises(ValueError, match=r"kl_coef=0.001 needs ref_logp"):
        algo.loss(new_logp_for(seq), seq)
    grpo, seq = batch_sequences("grpo")
    with pytest.raises(ValueError, match=r"ref_logp given, but kl_coef is 0"):
        grpo.loss(new_logp_for(seq), seq, ref_logp=new_logp_for(seq).detach())
    _, stats = grpo.loss(new_logp_for(seq), seq)
    assert "kl" not in stats


def test_loss_rejects_misaligned_inputs() -> None:
    algo, seq = batch_sequences("graft")
    good = new_logp_for(seq)
    with pytest.raises(ValueError, match="rows for"):
        algo.loss(good[:-1], seq)
    with pytest.raises(ValueError, match="has only"):
        algo.loss(good[:, :1], seq)
    with pytest.raises(ValueError, match="must be \\[B, T\\]"):
        algo.loss(good[0], seq)


@pytest.mark.parametrize("name", sorted(algorithms.available()))
def test_every_entry_runs_a_full_step_with_finite_loss_and_gradient(name: str) -> None:
    receivers = ["A"] if name == "graft-stored" else ["A", "B"]
    algo, rollouts, transfers, _ = run_exchange(name, PAIR, receivers=receivers)
    batches, _ = algo.build_batches(rollouts, transfers, receivers, np.random.default_rng(0))
    for batch in batches.values():
        assert sorted(j for mb in batch.minibatches for j in mb) == list(
            range(len(batch.sequences))
        )
        for minibatch in batch.minibatches:
            sequences = [batch.sequences[j] for j in minibatch]
            new_logp = new_logp_for(sequences, seed=len(minibatch))
            ref = {"ref_logp": new_logp.detach() - 0.1} if algo.needs_reference else {}
            loss, stats = algo.loss(new_logp, sequences, **ref)
            (grad,) = torch.autograd.grad(loss, new_logp)
            assert torch.isfinite(loss) and torch.isfinite(grad).all()
            assert stats["pg_tokens"] + stats["nll_tokens"] > 0


def test_an_empty_minibatch_has_zero_loss() -> None:
    algo = algorithms.make("graft")
    loss, stats = algo.loss(torch.zeros(0, 3, dtype=torch.float64, requires_grad=True), [])
    assert loss.item() == 0.0 and stats["pg_tokens"] == 0
