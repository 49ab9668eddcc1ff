"""Token-budget micro-batches (`policies.micro_batches`): every row once, within the budget,
little padding on the paper's length mix, and the unsplit minibatch's gradient."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_batches import rollout_batch

import algorithms
from graft_env.policies import SamplingParams
from graft_env.policies.micro_batches import padded_size, token_budget, token_counts
from graft_env.policies.training import OptimStep, optimise

lengths = st.lists(st.tuples(st.integers(1, 40), st.integers(1, 60)), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(lengths, st.integers(0, 200))
def test_groups_hold_every_row_once_in_minibatch_order_within_the_budget(rows, extra):
    prompts, responses = [p for p, _ in rows], [r for _, r in rows]
    budget = max(p + r for p, r in rows) + extra
    groups = token_budget(prompts, responses, budget, "test")
    assert sorted(j for group in groups for j in group) == list(range(len(rows)))
    for group in groups:
        assert group == sorted(group)
        assert padded_size(group, prompts, responses) <= budget
    real, padded = token_counts(groups, prompts, responses)
    assert real == sum(prompts) + sum(responses) <= padded


def test_a_row_over_the_budget_is_named():
    with pytest.raises(ValueError, match="scoring: row 1 has 5 prompt \\+ 9 response tokens"):
        token_budget([3, 5], [4, 9], 13, "scoring")


def paper_mix(groups: int, seed: int) -> tuple[list[int], list[int]]:
    """`groups` prompts of 80-200 tokens x 8 responses of mean ~800 tokens, 15 % cut at
    4,096 (the rest log-normal around 160)."""
    rng = np.random.default_rng(seed)
    rows = 8 * groups
    responses = np.minimum(rng.lognormal(np.log(160), 0.8, rows).astype(int) + 1, 4096)
    cut = rng.random(rows) < 0.15
    responses[cut] = 4096
    prompts = np.repeat(rng.integers(80, 200, groups), 8)
    return prompts.tolist(), responses.tolist()


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_padding_on_the_paper_length_mix_stays_under_15_percent(seed):
    prompts, responses = paper_mix(32, seed)  # one of the paper's minibatches (32 x 8)
    assert 600 < np.mean(responses) < 1000
    real, padded = token_counts(token_budget(prompts, responses, 8192, "mix"), prompts, responses)
    assert padded <= 1.15 * real
    fixed = [list(range(start, start + 4)) for start in range(0, 256, 4)]
    real_fixed, padded_fixed = token_counts(fixed, prompts, responses)
    assert padded_fixed > 2 * real_fixed  # what 4-row micro-batches in minibatch order pad


def _optimise(policy, batch, loss_fn, **step_options) -> tuple[dict, list[torch.Tensor]]:
    prompt_ids = [policy.encode_prompt(batch.prompts[s.prompt_index]) for s in batch.sequences]
    model = type(policy.model).from_pretrained(policy.path).eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    step = OptimStep(temperature=1.0, pad_id=policy.pad_id, grad_clip=1e9, **step_options)
    metrics = optimise(
        model, optimizer, prompt_ids, batch.sequences, batch.minibatches, loss_fn, step
    )
    return metrics, [p.detach() for p in model.parameters()]


@pytest.mark.parametrize("algorithm", ["grpo", "dr-grpo"])
def test_token_budget_micro_batches_give_the_unsplit_minibatch_gradient(policy, algorithm):
    loss_fn = algorithms.make(algorithm).loss
    batch = rollout_batch(policy, seed=4)
    batch.sequences = [  # peers last in the minibatch (SPEC §5), kept there by the split
        s if i < 6 else dataclasses.replace(s, is_peer=True) for i, s in enumerate(batch.sequences)
    ]
    prompt_len = len(policy.encode_prompt(batch.prompts[0]))
    longest = max(len(s.response_token_ids) for s in batch.sequences)
    whole, whole_params = _optimise(policy, batch, loss_fn, micro_batch_size=None)
    split, split_params = _optimise(
        policy,
        batch,
        loss_fn,
        micro_batch_size=None,
        max_tokens_per_micro_batch=3 * (prompt_len + longest + 4),
        logits_chunk_tokens=7,
    )
    assert split["loss"] == pytest.approx(whole["loss"], abs=1e-6)
    assert split["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-4)
    assert split["entropy"] == pytest.approx(whole["entropy"], rel=1e-5)
    assert 0 <= split["padding_share"] < 1 and 0 <= whole["padding_share"] < 1
    for a, b in zip(whole_params, split_params, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_scoring_under_a_token_budget_gives_the_same_logprobs(model_dirs, make_policy):
    plain = make_policy(model_dirs["llama"])
    budgeted = make_policy(
        model_dirs["llama"], max_tokens_per_micro_batch=250, logits_chunk_tokens=5
    )
    batch = rollout_batch(plain)
    prompts = [batch.prompts[s.prompt_index] for s in batch.sequences]
    tokens = [s.response_token_ids for s in batch.sequences]
    expected, scored = plain.score_tokens(prompts, tokens), budgeted.score_tokens(prompts, tokens)
    for a, b in zip(expected, scored, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


def test_the_update_reports_its_padding_share(policy):
    batch = rollout_batch(policy)
    metrics = policy.update(batch, algorithms.make("grpo").loss)
    prompt_ids = [policy.encode_prompt(batch.prompts[s.prompt_index]) for s in batch.sequences]
    prompts = [len(p) for p in prompt_ids]
    responses = [len(s.response_token_ids) for s in batch.sequences]
    real, padded = token_counts([list(range(len(prompts)))], prompts, responses)
    assert metrics["padding_share"] == pytest.approx(1 - real / padded)


def test_a_budget_below_a_full_length_row_is_refused_before_sampling(model_dirs, make_policy):
    policy = make_policy(model_dirs["llama"], max_tokens_per_micro_batch=40)
    prompt = "What is 2 + 3?"
    room = 40 - len(policy.encode_prompt(prompt))
    fits = SamplingParams(max_new_tokens=room, seed=0)
    assert len(policy.generate([prompt], 1, fits)[0]) == 1
    with pytest.raises(ValueError, match=r"over max_tokens_per_micro_batch=40.*raise the budget"):
        policy.generate([prompt], 1, dataclasses.replace(fits, max_new_tokens=room + 1))
