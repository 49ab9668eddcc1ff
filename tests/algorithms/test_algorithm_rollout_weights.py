"""The rollout correction's data in the batch and the loss: own rows take the trainer's
log-probs and per-token weights the correction set on their rollouts; peer rows never do."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from algorithms.collate import collate
from algorithms.testing import PAIR, run_exchange


def corrected_batches():
    """GRAFT batches of A and B, A's rollouts carrying the correction's fields (one response
    left as sampled), and the batches built without them."""
    algo, rollouts, transfers, _ = run_exchange("graft", PAIR)
    plain, _ = algo.build_batches(rollouts, transfers, ["A", "B"], np.random.default_rng(0))
    own = rollouts["A"]
    own.train_logprobs = [[lp - 0.25 for lp in group] for group in own.logprobs]
    own.rollout_weights = [
        [np.linspace(0.5, 1.5, len(lp)) for lp in group] for group in own.logprobs
    ]
    own.train_logprobs[4][1] = own.rollout_weights[4][1] = None  # retokenised: left as sampled
    batches, _ = algo.build_batches(rollouts, transfers, ["A", "B"], np.random.default_rng(0))
    return algo, rollouts, plain, batches


def test_own_rows_take_the_rescored_logprobs_and_weights_and_peer_rows_do_not():
    _, rollouts, plain, batches = corrected_batches()
    own = rollouts["A"]
    sequences = batches["A"].sequences
    assert len(sequences) == len(plain["A"].sequences)
    seen = {}
    for seq, before in zip(sequences, plain["A"].sequences, strict=True):
        if seq.is_peer:
            assert seq.rollout_weights is None
            np.testing.assert_array_equal(seq.old_logprobs, before.old_logprobs)
            continue
        p = seq.prompt_index
        i = seen[p] = seen.get(p, -1) + 1  # own rows of a prompt come in response order
        if (p, i) == (4, 1):
            assert seq.rollout_weights is None
            np.testing.assert_array_equal(seq.old_logprobs, own.logprobs[p][i])
        else:
            np.testing.assert_array_equal(seq.old_logprobs, own.train_logprobs[p][i])
            np.testing.assert_array_equal(seq.rollout_weights, own.rollout_weights[p][i])
        unchanged = ("old_logprobs", "rollout_weights")
        assert {k: v for k, v in vars(seq).items() if k not in unchanged} == {
            k: v for k, v in vars(before).items() if k not in unchanged
        }
    assert 4 in seen
    for seq, before in zip(batches["B"].sequences, plain["B"].sequences, strict=True):
        assert seq.rollout_weights is None
        np.testing.assert_array_equal(seq.old_logprobs, before.old_logprobs)


def test_the_loss_scales_each_own_tokens_gradient_by_its_weight():
    algo, _, _, batches = corrected_batches()
    weighted = batches["A"].sequences
    unweighted = [dataclasses.replace(s, rollout_weights=None) for s in weighted]
    width = max(len(s.response_token_ids) for s in weighted) + 2
    generator = torch.Generator().manual_seed(0)
    base = torch.full((len(weighted), width), 5.0, dtype=torch.float64)  # junk on padding
    for j, s in enumerate(weighted):
        noise = 0.1 * torch.randn(len(s.old_logprobs), generator=generator, dtype=torch.float64)
        base[j, : len(s.old_logprobs)] = torch.as_tensor(s.old_logprobs) + noise
    grads = []
    for sequences in (weighted, unweighted):
        new_logp = base.clone().requires_grad_(True)
        loss, _ = algo.loss(new_logp, sequences)
        grads.append(torch.autograd.grad(loss, new_logp)[0])
    token_weights = collate(weighted, base).token_weights
    assert token_weights is not None
    for j, s in enumerate(weighted):
        expected = np.ones(width)  # 1 on rows without weights, and on padding
        if s.rollout_weights is not None:
            expected[: len(s.rollout_weights)] = s.rollout_weights
        np.testing.assert_array_equal(token_weights[j].numpy(), expected)
    torch.testing.assert_close(grads[0], grads[1] * token_weights, rtol=1e-12, atol=1e-15)
    assert not torch.equal(grads[0], grads[1])


def test_collate_gives_no_token_weights_without_any_and_refuses_a_misfit():
    _, _, plain, batches = corrected_batches()
    sequences = plain["A"].sequences
    new_logp = torch.zeros(len(sequences), 4, dtype=torch.float64)
    assert collate(sequences, new_logp).token_weights is None
    own = next(s for s in batches["A"].sequences if s.rollout_weights is not None)
    bad = dataclasses.replace(own, rollout_weights=np.ones(len(own.response_token_ids) + 1))
    with pytest.raises(ValueError, match=r"sequence 0 \(prompt \d+, source 'A'\) has \d tokens"):
        collate([bad], torch.zeros(1, 4, dtype=torch.float64))
