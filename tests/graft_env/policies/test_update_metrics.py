"""The clipped-token shares of a real update: pooled over the step's minibatches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from policy_batches import rollout_batch

import algorithms
from algorithms.exchange import ExchangeStats
from algorithms.training.metrics import agent_step_metrics
from graft_env.types import AgentRollouts


def test_clipped_shares_pool_tokens_over_minibatches_and_are_the_only_clip_fractions(policy):
    batch = rollout_batch(policy)  # prompts 0 and 1, 4 responses each, advantages +1 / -1
    # Prompt 1's rows become peer rows whose behaviour log-probs sit 1 nat lower: ratio about
    # e > 1 + 0.28, so every token of a positive-advantage peer row is clipped, no other is.
    batch.sequences = [
        dataclasses.replace(s, is_peer=True, old_logprobs=np.asarray(s.old_logprobs) - 1.0)
        if s.prompt_index == 1
        else s
        for s in batch.sequences
    ]
    batch.minibatches = [[0, 1, 2, 3], [4, 5, 6, 7]]  # own-only first (ratio 1), then peers
    peers = [s for s in batch.sequences if s.is_peer]
    peer_tokens = sum(len(s.response_token_ids) for s in peers)
    clipped = sum(len(s.response_token_ids) for s in peers if s.advantage > 0)

    update = policy.update(batch, algorithms.make("grpo").loss)
    rollouts = AgentRollouts(
        agent=policy.name,
        prompt_ids=["p0", "p1"],
        prompts=batch.prompts,
        texts=[["x"] * 4] * 2,
        token_ids=[
            [s.response_token_ids for s in batch.sequences[4 * p : 4 * p + 4]] for p in (0, 1)
        ],
        logprobs=[[s.old_logprobs for s in batch.sequences[4 * p : 4 * p + 4]] for p in (0, 1)],
        finish_reasons=[["stop"] * 4] * 2,
        rewards=np.array([[1, 0, 1, 0], [1, 0, 1, 0]]),
    )
    row = agent_step_metrics(
        policy.name, rollouts, {}, update, {}, ExchangeStats(strategy="none"), {}, sampled=8
    )
    assert 0 < clipped < peer_tokens
    # Pooled: clipped peer tokens / peer tokens of the whole step. A mean of per-minibatch
    # fractions would give half this (the own-only minibatch counting as 0).
    assert row["clipped_share_peer"] == pytest.approx(clipped / peer_tokens)
    assert row["clipped_share_own"] == 0.0
    assert [key for key in row if "clip" in key and "share" not in key] == [
        "loss_fn/clipped_own",
        "loss_fn/clipped_peer",
    ]
