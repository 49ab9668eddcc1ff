"""Sampling and scoring of HFPolicy: recorded log-probs equal the training forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graft_env.policies.base import Generation, SamplingParams
from graft_env.policies.forward import response_logprobs
from graft_env.policies.generation import DynamicLayer, _ReservedLayer, nucleus

TOLERANCE = 1e-4  # fp32: generation (KV cache, left padding) vs teacher-forced forward
PROBLEMS = ["What is 2 + 3?", "What is 41 + 17? Show the carry.", "Add 9 and 9."]


def _flatten(prompts, groups):
    return [(prompt, gen) for prompt, group in zip(prompts, groups, strict=True) for gen in group]


def test_generation_logprobs_match_scoring_and_training_forward(policy):
    prompts = [policy.format_prompt(p) for p in PROBLEMS]
    groups = policy.generate(prompts, 3, SamplingParams(max_new_tokens=24, seed=3))
    assert [len(g) for g in groups] == [3, 3, 3]
    pairs = _flatten(prompts, groups)
    scored = policy.score_tokens([p for p, _ in pairs], [g.token_ids for _, g in pairs])
    with torch.no_grad():
        trained = response_logprobs(
            policy.model,
            [policy.encode_prompt(p) for p, _ in pairs],
            [g.token_ids for _, g in pairs],
            pad_id=policy.pad_id,
            temperature=policy.temperature,
        ).logprobs.numpy()
    for row, ((_, gen), from_score) in enumerate(zip(pairs, scored, strict=True)):
        assert len(gen.token_ids) == len(gen.logprobs) == len(from_score)
        np.testing.assert_allclose(gen.logprobs, from_score, atol=TOLERANCE, rtol=0)
        length = len(gen.token_ids)
        np.testing.assert_allclose(gen.logprobs, trained[row, :length], atol=TOLERANCE, rtol=0)


def test_logprobs_use_the_policy_temperature_not_the_sampling_one(make_policy, model_dirs):
    hot = make_policy(model_dirs["gpt2"], temperature=2.0)
    prompt = hot.format_prompt(PROBLEMS[0])
    [[gen]] = hot.generate([prompt], 1, SamplingParams(temperature=0.5, max_new_tokens=12))
    [scored] = hot.score_tokens([prompt], [gen.token_ids])
    np.testing.assert_allclose(gen.logprobs, scored, atol=TOLERANCE, rtol=0)
    cold = make_policy(model_dirs["gpt2"], temperature=1.0)
    [at_one] = cold.score_tokens([prompt], [gen.token_ids])
    assert np.abs(at_one - scored).max() > 1e-3  # the temperature really enters the log-probs


def test_same_seed_same_generations_and_new_seed_differs(policy):
    prompts = [policy.format_prompt(p) for p in PROBLEMS[:2]]
    first = policy.generate(prompts, 4, SamplingParams(max_new_tokens=16, seed=11))
    again = policy.generate(prompts, 4, SamplingParams(max_new_tokens=16, seed=11))
    other = policy.generate(prompts, 4, SamplingParams(max_new_tokens=16, seed=12))

    def ids(groups):
        return [[g.token_ids for g in group] for group in groups]

    assert ids(first) == ids(again)
    assert ids(first) != ids(other)


def test_tiny_top_p_is_greedy_decoding(policy):
    prompts = [policy.format_prompt(p) for p in PROBLEMS]
    greedy = policy.generate(prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=10))
    nucleus = policy.generate(prompts, 2, SamplingParams(top_p=1e-6, max_new_tokens=10, seed=5))
    for [argmax], pair in zip(greedy, nucleus, strict=True):
        assert [g.token_ids for g in pair] == [argmax.token_ids, argmax.token_ids]


def test_length_finish_and_text_without_special_tokens(policy):
    [[gen]] = policy.generate(
        [policy.format_prompt(PROBLEMS[0])], 1, SamplingParams(max_new_tokens=5, seed=0)
    )
    assert gen.finish_reason in ("stop", "length")
    if gen.finish_reason == "length":
        assert len(gen.token_ids) == 5 and policy.eos_id not in gen.token_ids
    assert policy.tokenizer.eos_token not in gen.text


def test_eos_ends_rows_at_different_steps_with_consistent_logprobs(policy):
    """Boost the EOS logit so rows stop at varied steps inside one batch."""

    def boost_eos(module, inputs, logits):
        logits[..., policy.eos_id] += 4.0
        return logits

    hook = policy.model.get_output_embeddings().register_forward_hook(boost_eos)
    try:
        prompt = policy.format_prompt(PROBLEMS[0])
        [group] = policy.generate([prompt], 8, SamplingParams(max_new_tokens=40, seed=1))
        [*scored] = policy.score_tokens([prompt] * 8, [g.token_ids for g in group])
    finally:
        hook.remove()
    stopped = [g for g in group if g.finish_reason == "stop"]
    assert len({len(g.token_ids) for g in stopped}) >= 2  # rows ended at different steps
    for gen, from_score in zip(group, scored, strict=True):
        np.testing.assert_allclose(gen.logprobs, from_score, atol=TOLERANCE, rtol=0)
        eos_count = gen.token_ids.count(policy.eos_id)
        if gen.finish_reason == "stop":
            assert gen.token_ids[-1] == policy.eos_id and eos_count == 1
        else:
            assert len(gen.token_ids) == 40 and eos_count == 0


def test_score_appends_eos_only_to_a_finished_response(policy):
    prompt = policy.format_prompt(PROBLEMS[1])
    text = "41 + 17 = 58. \\boxed{58}"
    [ended] = policy.score([prompt], [text], ["stop"])
    [cut] = policy.score([prompt], [text], ["length"])
    assert ended.token_ids == [*cut.token_ids, policy.eos_id]
    assert policy.eos_id not in cut.token_ids
    [direct] = policy.score_tokens([prompt], [ended.token_ids])
    np.testing.assert_allclose(ended.logprobs, direct, atol=0, rtol=0)
    assert ended.mean_logp == pytest.approx(float(np.mean(direct)))
    # Causal scoring: the cut response's log-probs are the finished one's without EOS.
    np.testing.assert_allclose(cut.logprobs, ended.logprobs[:-1], atol=TOLERANCE, rtol=0)


def test_score_needs_one_finish_reason_per_response(policy):
    prompt = policy.format_prompt(PROBLEMS[0])
    with pytest.raises(ValueError, match="2 responses but 1 finish reasons"):
        policy.score([prompt, prompt], ["5", "6"], ["stop"])


def test_an_empty_cut_response_is_a_clear_error(policy):
    """A source that sampled only special tokens until max_new_tokens leaves no text and
    no EOS: nothing the receiver could score or train on."""
    prompt = policy.format_prompt(PROBLEMS[0])
    [only_eos] = policy.score([prompt], [""], ["stop"])
    assert only_eos.token_ids == [policy.eos_id]
    with pytest.raises(ValueError, match=r"responses \[1\] have no text and no EOS"):
        policy.score([prompt, prompt], ["5", ""], ["length", "length"])


def test_scoring_is_independent_of_batch_padding(policy):
    prompts = [policy.format_prompt(p) for p in PROBLEMS]
    responses = ["5", "58 is the sum of 41 and 17, so \\boxed{58}", "18"]
    reasons = ["stop", "length", "stop"]
    together = policy.score(prompts, responses, reasons)
    for j, batched in enumerate(together):
        [alone] = policy.score([prompts[j]], [responses[j]], [reasons[j]])
        np.testing.assert_allclose(alone.logprobs, batched.logprobs, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", -0.1), ("top_p", 0.0), ("top_p", 1.5), ("max_new_tokens", 0)],
)
def test_bad_sampling_params_are_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_generation_rejects_mismatched_logprobs():
    with pytest.raises(ValueError, match="log-probs"):
        Generation(text="", token_ids=[1, 2], logprobs=np.zeros(1), finish_reason="stop")
    with pytest.raises(ValueError, match="finish_reason"):
        Generation(text="", token_ids=[], logprobs=np.zeros(0), finish_reason="eos")


def test_the_reserved_kv_cache_stores_the_autocast_dtype():
    """Under mixed precision RoPE hands the cache float32 keys; attention computes in
    bfloat16 either way, so the reserved buffer keeps bfloat16 (a third less memory)."""
    layer = DynamicLayer()
    layer.update(torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4).to(torch.bfloat16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reserved = _ReservedLayer(layer, extra=5)
    assert reserved.keys.dtype == reserved.values.dtype == torch.bfloat16
    torch.testing.assert_close(reserved.keys, layer.keys.to(torch.bfloat16))
    plain = _ReservedLayer(layer, extra=5)  # no autocast: each as given
    assert (plain.keys.dtype, plain.values.dtype) == (torch.float32, torch.bfloat16)


def test_the_kv_buffer_doubles_as_it_fills_instead_of_reserving_every_position():
    """Decoding is bound by reading the cache: a buffer sized for max_new_tokens up front
    made attention and every row drop touch ~4x the positions in use (the study's
    evaluation stops after <= 34 of 128 tokens). Contents are those of concatenation."""
    layer = DynamicLayer()
    keys, values = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4)
    layer.update(keys, values)
    reserved = _ReservedLayer(layer, extra=1000)
    steps = [(torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)) for _ in range(12)]
    for step_keys, step_values in steps:
        reserved.update(step_keys, step_values)
    expected_keys = torch.cat([keys, *(k for k, _ in steps)], dim=2)
    expected_values = torch.cat([values, *(v for _, v in steps)], dim=2)
    assert torch.equal(reserved.keys, expected_keys)
    assert torch.equal(reserved.values, expected_values)
    used_bytes = expected_keys.numel() * expected_keys.element_size()
    assert reserved.keys.untyped_storage().nbytes() <= 2 * used_bytes
    reserved.batch_select_indices(torch.tensor([2, 0]))
    assert torch.equal(reserved.keys, expected_keys[[2, 0]])
    assert torch.equal(reserved.values, expected_values[[2, 0]])
    assert reserved.keys.untyped_storage().nbytes() <= 2 * used_bytes * 2 // 3
    reserved.update(torch.randn(2, 2, 988, 4), torch.randn(2, 2, 988, 4))  # exactly the limit
    with pytest.raises(RuntimeError, match="reserved 1005 positions, 1006 needed"):
        reserved.update(torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4))


def _sorted_nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The definition: sort descending, keep each token whose mass before it is < top_p."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


@settings(max_examples=60, deadline=None)
@given(
    vocab=st.sampled_from([2, 7, 64, 65, 373, 3000]),
    rows=st.integers(1, 5),
    scale=st.sampled_from([0.01, 1.0, 4.0, 20.0]),
    top_p=st.floats(1e-6, 0.999999),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_nucleus_equals_the_full_sort_definition(vocab, rows, scale, top_p, seed):
    """Only the top candidates are ranked (sorting the whole vocabulary per token was 8-10 %
    of the tiny models' decoding); flat rows whose nucleus is wider fall back to more."""
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * scale
    probs = torch.softmax(logits, dim=-1)
    assert torch.equal(nucleus(probs, top_p), _sorted_nucleus(probs, top_p))
