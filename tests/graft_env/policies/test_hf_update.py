"""HFPolicy.update with the GRPO loss, micro-batching exactness, and checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from policy_batches import PROBLEMS, parameters, rollout_batch

import algorithms
from graft_env.policies.base import Done, Policy, SamplingParams
from graft_env.policies.training import OptimStep, optimise
from graft_env.types import TrainBatch


def _current_loss(policy, batch: TrainBatch, loss_fn) -> float:
    prompts = [batch.prompts[s.prompt_index] for s in batch.sequences]
    scored = policy.score_tokens(prompts, [s.response_token_ids for s in batch.sequences])
    width = max(len(row) for row in scored)
    new_logp = torch.tensor(np.stack([np.pad(row, (0, width - len(row))) for row in scored]))
    loss, _ = loss_fn(new_logp, batch.sequences)
    return float(loss)


def test_update_changesparameters_and_lowers_the_grpo_loss(policy):
    loss_fn = algorithms.make("grpo").loss
    batch = rollout_batch(policy)
    before_params = parameters(policy)
    before = _current_loss(policy, batch, loss_fn)
    metrics = policy.update(batch, loss_fn)
    after = _current_loss(policy, batch, loss_fn)
    assert after < before - 1e-3
    assert metrics["loss"] == pytest.approx(before, abs=1e-5)  # first minibatch: ratio == 1
    assert metrics["tokens"] == sum(len(s.response_token_ids) for s in batch.sequences)
    assert metrics["grad_norm"] > 0 and metrics["entropy"] > 0
    changed = [
        not torch.equal(a, b) for a, b in zip(before_params, parameters(policy), strict=True)
    ]
    assert all(changed)


def test_micro_batching_gives_the_same_gradient(policy, make_policy, model_dirs):
    """Two-pass micro-batching reproduces the whole-minibatch gradient for a token-mean loss."""
    loss_fn = algorithms.make("grpo").loss
    batch = rollout_batch(policy, seed=4)
    prompt_ids = [policy.encode_prompt(batch.prompts[s.prompt_index]) for s in batch.sequences]
    results = []
    for micro in (None, 3):
        model = type(policy.model).from_pretrained(policy.path).eval()
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        step = OptimStep(
            temperature=1.0, pad_id=policy.pad_id, grad_clip=1e9, micro_batch_size=micro
        )
        metrics = optimise(
            model, optimizer, prompt_ids, batch.sequences, batch.minibatches, loss_fn, step
        )
        results.append((metrics, [p.detach() for p in model.parameters()]))
    (whole, whole_params), (micro, micro_params) = results
    assert micro["loss"] == pytest.approx(whole["loss"], abs=1e-6)
    assert micro["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-4)
    assert micro["entropy"] == pytest.approx(whole["entropy"], rel=1e-5)
    for a, b in zip(whole_params, micro_params, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_minibatch_order_and_count_are_followed(policy):
    calls = []

    def recording_loss(new_logp, sequences):
        calls.append([s.advantage for s in sequences])
        return algorithms.make("grpo").loss(new_logp, sequences)

    batch = rollout_batch(policy)
    batch.minibatches = [[1, 3], [0], [2, 5, 4]]
    metrics = policy.update(batch, recording_loss)
    assert calls == [[-1.0, -1.0], [1.0], [1.0, -1.0, 1.0]]
    assert metrics["minibatches"] == 3 and metrics["sequences"] == 6


@pytest.mark.parametrize(
    ("minibatches", "error", "match"),
    [([[0], []], ValueError, "minibatch 1 .* is empty"), ([[0, 99]], IndexError, r"\[99\]")],
)
def test_bad_minibatches_are_rejected(policy, minibatches, error, match):
    batch = rollout_batch(policy)
    batch.minibatches = minibatches
    with pytest.raises(error, match=match):
        policy.update(batch, algorithms.make("grpo").loss)


def test_bad_prompt_index_is_rejected(policy):
    batch = rollout_batch(policy)
    batch.prompts = batch.prompts[:1]
    with pytest.raises(IndexError, match="prompt_index 1"):
        policy.update(batch, algorithms.make("grpo").loss)


def test_save_load_restores_weights_optimizer_and_sampling(make_policy, model_dirs, tmp_path):
    loss_fn = algorithms.make("grpo").loss
    original = make_policy(model_dirs["llama"])
    original.update(rollout_batch(original, seed=1), loss_fn)
    original.save(tmp_path / "ckpt")
    restored = make_policy(model_dirs["llama"])
    restored.load(tmp_path / "ckpt")

    sampling = SamplingParams(max_new_tokens=10, seed=9)
    prompts = [original.format_prompt(p) for p in PROBLEMS]
    for ours, theirs in zip(
        original.generate(prompts, 2, sampling),
        restored.generate(prompts, 2, sampling),
        strict=True,
    ):
        for a, b in zip(ours, theirs, strict=True):
            assert a.token_ids == b.token_ids
            np.testing.assert_array_equal(a.logprobs, b.logprobs)
    # Same optimizer moments: the next update moves both identically.
    batch = rollout_batch(original, seed=2)
    original.update(batch, loss_fn)
    restored.update(batch, loss_fn)
    for a, b in zip(parameters(original), parameters(restored), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_load_rejects_a_plain_model_and_another_tokenizer(make_policy, model_dirs, tmp_path):
    policy = make_policy(model_dirs["gpt2"])
    with pytest.raises(FileNotFoundError, match=r"optimizer\.pt"):
        policy.load(model_dirs["gpt2"])
    other = make_policy(model_dirs["llama"])
    other.save(tmp_path / "other")
    with pytest.raises(ValueError, match="different tokenizer"):
        policy.load(tmp_path / "other")


def test_gradient_checkpointing_gives_the_same_update(make_policy, model_dirs):
    loss_fn = algorithms.make("grpo").loss
    plain = make_policy(model_dirs["llama"])
    checkpointed = make_policy(model_dirs["llama"], gradient_checkpointing=True)
    # transformers >= 5.20 calls it is_activation_checkpointing, older is_gradient_checkpointing
    model = checkpointed.model
    flag = getattr(model, "is_activation_checkpointing", None)
    assert (flag if flag is not None else model.is_gradient_checkpointing) is True
    batch = rollout_batch(plain, seed=3)
    plain_metrics = plain.update(batch, loss_fn)
    checkpointed_metrics = checkpointed.update(batch, loss_fn)
    assert checkpointed_metrics["grad_norm"] == pytest.approx(plain_metrics["grad_norm"], rel=1e-4)
    # The plain update shares each prompt's forward across its group (forward.prefill);
    # checkpointing cannot, so the two gradients differ by float rounding (~1e-6 relative),
    # which Adam's first step (update ~ sign(g) * lr) magnifies on near-zero entries.
    for a, b in zip(parameters(plain), parameters(checkpointed), strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
    assert not checkpointed.model.training  # back in eval mode after the update


def test_bfloat16_weights_sample_score_and_train(make_policy, model_dirs):
    policy = make_policy(model_dirs["gpt2"], dtype="bfloat16")
    assert next(policy.model.parameters()).dtype == torch.bfloat16
    prompt = policy.format_prompt(PROBLEMS[0])
    [group] = policy.generate([prompt], 2, SamplingParams(max_new_tokens=8, seed=0))
    for gen, scored in zip(
        group, policy.score_tokens([prompt] * 2, [g.token_ids for g in group]), strict=True
    ):
        assert scored.dtype == np.float32
        np.testing.assert_allclose(gen.logprobs, scored, atol=0.1, rtol=0)  # bf16 rounding
    metrics = policy.update(rollout_batch(policy), algorithms.make("grpo").loss)
    assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0


def test_half_precision_weights_refuse_an_update_that_would_round_away(make_policy, model_dirs):
    policy = make_policy(model_dirs["gpt2"], dtype="bfloat16", lr=1e-6)
    before = parameters(policy)
    with pytest.raises(ValueError, match=r"dtype='bfloat16' with lr=1e-06.*autocast: bfloat16"):
        policy.update(rollout_batch(policy), algorithms.make("grpo").loss)
    for a, b in zip(before, parameters(policy), strict=True):
        assert torch.equal(a, b)


def test_mixed_precision_computes_in_bfloat16_and_trains_float32_weights(make_policy, model_dirs):
    """autocast: every forward (sampling, scoring, training) runs under bfloat16 autocast,
    the weights stay float32, and the paper's lr 1e-6 still moves every weight tensor."""
    policy = make_policy(model_dirs["llama"], autocast="bfloat16", lr=1e-6)
    exact = make_policy(model_dirs["llama"])  # same weights, float32 compute
    assert next(policy.model.parameters()).dtype == torch.float32
    autocast_seen: list[bool] = []
    policy.model.base_model.register_forward_hook(  # every forward runs the body
        lambda *_: autocast_seen.append(torch.is_autocast_enabled(policy.device.type))
    )

    def forwards_in_bfloat16(run) -> bool:
        autocast_seen.clear()
        run()
        return bool(autocast_seen) and all(autocast_seen)

    batch = None

    def rollout() -> None:
        nonlocal batch
        batch = rollout_batch(policy)

    assert forwards_in_bfloat16(rollout)
    prompts = [batch.prompts[s.prompt_index] for s in batch.sequences]
    token_ids = [s.response_token_ids for s in batch.sequences]
    assert forwards_in_bfloat16(lambda: policy.score_tokens(prompts, token_ids))
    sampled = np.concatenate([s.old_logprobs for s in batch.sequences])
    scored = np.concatenate(policy.score_tokens(prompts, token_ids))
    in_float32 = np.concatenate(exact.score_tokens(prompts, token_ids))
    np.testing.assert_allclose(sampled, scored, atol=0.1, rtol=0)  # both in bfloat16
    assert np.abs(scored - in_float32).max() > 1e-4  # scoring did not compute in float32
    before = parameters(policy)
    assert forwards_in_bfloat16(lambda: policy.update(batch, algorithms.make("grpo").loss))
    moved = [not torch.equal(a, b) for a, b in zip(before, parameters(policy), strict=True)]
    assert all(moved), f"{moved.count(False)} of {len(moved)} weight tensors did not move"


def test_the_async_methods_return_finished_results_equal_to_the_blocking_ones(
    make_policy, model_dirs
):
    """The loop only calls `generate_async` / `update_async` (a Ray actor's are in flight);
    an in-process policy has done the work when they return."""
    loss_fn = algorithms.make("grpo").loss
    ours, theirs = (make_policy(model_dirs["gpt2"]) for _ in range(2))
    assert isinstance(ours, Policy)
    sampling = SamplingParams(max_new_tokens=10, seed=4)
    prompts = [ours.format_prompt(p) for p in PROBLEMS]
    started = ours.generate_async(prompts, 2, sampling)
    assert isinstance(started, Done)
    for a, b in zip(started.result(), theirs.generate(prompts, 2, sampling), strict=True):
        assert [g.token_ids for g in a] == [g.token_ids for g in b]
    batch = rollout_batch(ours, seed=5)
    before = parameters(ours)
    update = ours.update_async(batch, loss_fn)
    assert any(not torch.equal(a, b) for a, b in zip(before, parameters(ours), strict=True))
    assert update.result() == theirs.update(batch, loss_fn)
