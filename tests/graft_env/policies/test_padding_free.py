"""Padding-free forwards (`policies.forward`, the `padding_free` option): the packed row's
log-probs, entropy and gradients equal the padded path's, on tiny random models of every
architecture the suite covers, with `sdpa` and `eager` attention (the CPU can run no
flash-attention kernel: these two keep the rows apart with a block-diagonal mask built
from the position ids; flash_attention_* would run varlen kernels, not run here).

Tolerance: float32 throughout (unit roundoff u = 6e-8). The packed row sums attention over
other key positions (masked to exactly 0) and runs the linear layers at another batch shape,
so the kernels reduce in other orders and only rounding differs: 2e-5 absolute on log-probs,
and on each gradient tensor `GRAD_RTOL` relative to its norm. A gradient entry is a sum over
the batch's tokens and the hidden width (K of about 10^3 products); reordering such a sum
changes it by at most about K u times the sum of the terms' magnitudes, so an entry where
the terms cancel has no relative bound of its own (an element-wise rtol fails on one such
entry of Gemma3's embedding gradient on an Intel AMX CPU) while the tensor's norm does:
K u is about 6e-5, and a real packing bug (rows that see each other) moves it by O(1).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from policy_batches import parameters, rollout_batch
from test_chunked_logprobs import CONFIGS, PROMPTS, RESPONSES, VOCAB

import algorithms
from graft_env.policies.forward import (
    PACKING_ATTENTION,
    packed_layout,
    packing_error,
    response_logprobs,
)
from graft_env.policies.micro_batches import forward_tokens, token_budget, token_counts
from graft_env.policies.options import ATTENTION_IMPLEMENTATIONS


def _model(name: str, attention: str) -> torch.nn.Module:
    config_class, fields = CONFIGS[name]
    torch.manual_seed(0)
    config = config_class(
        vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0, **fields
    )
    return transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=attention
    ).eval()


GRAD_RTOL = 6e-5  # of a gradient tensor's norm: K u for K ~ 10^3 reordered float32 products


def _logprobs_and_grads(model, padding_free: bool, chunk: int | None):
    model.zero_grad(set_to_none=True)
    result = response_logprobs(
        model,
        PROMPTS,
        RESPONSES,
        pad_id=0,
        temperature=0.7,
        share_prompts=False,
        logits_chunk_tokens=chunk,
        padding_free=padding_free,
    )
    weights = torch.linspace(-1, 1, result.logprobs.numel()).reshape(result.logprobs.shape)
    (result.logprobs * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return result.logprobs.detach(), result.entropy_sum, grads


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("chunk", [None, 4])
def test_packed_logprobs_and_gradients_equal_the_padded_ones(name, attention, chunk):
    model = _model(name, attention)
    padded, padded_entropy, padded_grads = _logprobs_and_grads(model, False, chunk)
    packed, packed_entropy, packed_grads = _logprobs_and_grads(model, True, chunk)
    torch.testing.assert_close(packed, padded, atol=2e-5, rtol=0)
    assert packed_entropy == pytest.approx(padded_entropy, rel=1e-5)
    assert packed_grads.keys() == padded_grads.keys()
    for key, grad in padded_grads.items():
        error = torch.linalg.vector_norm(packed_grads[key] - grad)
        assert error <= GRAD_RTOL * torch.linalg.vector_norm(grad), key


def test_packed_rows_do_not_see_each_other():
    """The check above can fail: without the position-id resets (one long sequence) the
    later rows attend to the earlier ones and their log-probs move."""
    model = _model("llama", "sdpa")
    input_ids, positions, _ = packed_layout(PROMPTS, RESPONSES, torch.device("cpu"))
    body = model.base_model
    with torch.no_grad():
        packed = body(input_ids=input_ids, position_ids=positions).last_hidden_state
        running = torch.arange(input_ids.shape[1])[None]
        joined = body(input_ids=input_ids, position_ids=running).last_hidden_state
    first = len(PROMPTS[0]) + len(RESPONSES[0])
    torch.testing.assert_close(packed[:, :first], joined[:, :first])
    assert (packed[:, first:] - joined[:, first:]).abs().max() > 1e-3


def test_packed_layout_predicts_each_response_token_from_the_one_before():
    input_ids, positions, predictors = packed_layout([[5, 6], [7]], [[8, 9, 10], [11]], "cpu")
    assert input_ids.tolist() == [[5, 6, 8, 9, 10, 7, 11]]
    assert positions.tolist() == [[0, 1, 2, 3, 4, 0, 1]]
    assert predictors.tolist() == [[1, 2, 3], [5, 0, 0]]
    with pytest.raises(ValueError, match="every prompt needs at least one token"):
        packed_layout([[]], [[3]], "cpu")


def test_an_attention_that_cannot_pack_is_refused_in_one_line():
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register("graft_unmasked", sdpa_attention_forward)
    model = _model("llama", "graft_unmasked")
    error = packing_error(model)
    assert error is not None and "\n" not in error
    assert "LlamaForCausalLM runs 'graft_unmasked'" in error
    with pytest.raises(ValueError, match="padding_free needs attn_implementation"):
        response_logprobs(model, PROMPTS, RESPONSES, pad_id=0, temperature=1.0, padding_free=True)
    assert packing_error(_model("llama", "sdpa")) is None


def test_every_attention_a_policy_loads_with_says_how_it_packs():
    """`PACKING_ATTENTION` describes exactly the loadable implementations (null loads sdpa)."""
    assert set(PACKING_ATTENTION) == set(ATTENTION_IMPLEMENTATIONS) - {None}


def test_padding_free_budget_counts_real_tokens():
    prompts, responses = [3, 3, 1, 1], [5, 1, 1, 1]
    assert forward_tokens([0, 1], prompts, responses) == 16
    assert forward_tokens([0, 1], prompts, responses, padding_free=True) == 12
    groups = token_budget(prompts, responses, 12, "test", padding_free=True)
    assert groups == [[0, 1], [2, 3]]
    assert token_counts(groups, prompts, responses, padding_free=True) == (16, 16)
    assert token_budget(prompts, responses, 12, "test") == [[0], [1, 2, 3]]  # 3 x (3 + 1)


@pytest.mark.parametrize("budget", [None, 100])
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_option_trains_and_scores_as_the_padded_policy(make_policy, model_dirs, arch, budget):
    """`HFPolicyOptions.padding_free` through `HFPolicy`: scoring and the update's loss
    and pre-clip grad norm, in one forward or under a token budget, equal the padded
    run's (the gradients themselves: the test above; AdamW's m/sqrt(v) blows rounding on
    near-zero gradients up to lr-sized steps, so the weights after a step are not
    compared)."""
    loss_fn = algorithms.make("grpo").loss
    runs = []
    for padding_free in (False, True):
        policy = make_policy(
            model_dirs[arch], max_tokens_per_micro_batch=budget, padding_free=padding_free
        )
        batch = rollout_batch(policy, seed=3)
        prompts = [batch.prompts[s.prompt_index] for s in batch.sequences]
        scored = policy.score_tokens(prompts, [s.response_token_ids for s in batch.sequences])
        before = parameters(policy)
        metrics = policy.update(batch, loss_fn)
        moved = [not torch.equal(a, b) for a, b in zip(before, parameters(policy), strict=True)]
        runs.append((scored, metrics, all(moved)))
    (scored, metrics, _), (packed_scored, packed_metrics, packed_moved) = runs
    for row, packed_row in zip(scored, packed_scored, strict=True):
        np.testing.assert_allclose(packed_row, row, atol=2e-5, rtol=0)
    assert packed_metrics["loss"] == pytest.approx(metrics["loss"], abs=1e-6)
    assert packed_metrics["grad_norm"] == pytest.approx(metrics["grad_norm"], rel=1e-4)
    assert packed_metrics["padding_share"] == 0
    assert budget is not None or metrics["padding_share"] > 0  # two prompt lengths
    assert packed_moved
