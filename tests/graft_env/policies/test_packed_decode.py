"""`packed_decode`: sampling on oneDNN-prepacked linear weights (policies.packed).

It may change GEMM rounding, never the model: the recorded log-probs stay those of
the training forward (within oneDNN's rounding), the packs follow every weight update,
and outside sampling the model runs its own aten kernels.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from policy_batches import rollout_batch

import algorithms
from graft_env.policies.base import SamplingParams
from graft_env.policies.options import HFPolicyOptions
from graft_env.policies.packed import PackedWeights
from graft_env.policies.zoo import load_policy

PROMPTS = ["What is 2 + 3?", "What is 41 + 17?"]
SAMPLING = SamplingParams(max_new_tokens=12, seed=3)


def _generate(policy):
    prompts = [policy.format_prompt(p) for p in PROMPTS]
    return prompts, [g for group in policy.generate(prompts, 4, SAMPLING) for g in group]


def _linears(policy):
    return [m for m in policy.model.modules() if type(m) is torch.nn.Linear]


def test_packed_sampling_draws_the_plain_tokens_with_the_training_log_probs(
    make_policy, model_dirs
):
    plain = make_policy(model_dirs["llama"])
    packed = make_policy(model_dirs["llama"], packed_decode=True)
    _, expected = _generate(plain)
    prompts, generated = _generate(packed)
    assert [g.token_ids for g in generated] == [g.token_ids for g in expected]
    rows = [p for p in prompts for _ in range(4)]
    scored = packed.score_tokens(rows, [g.token_ids for g in generated])
    for gen, plain_gen, training in zip(generated, expected, scored, strict=True):
        np.testing.assert_allclose(gen.logprobs, training, atol=1e-4, rtol=0)
        np.testing.assert_allclose(gen.logprobs, plain_gen.logprobs, atol=1e-4, rtol=0)
    # scoring (the training forward) ran aten's kernels: bitwise the plain policy's
    plain_scored = plain.score_tokens(rows, [g.token_ids for g in generated])
    for a, b in zip(scored, plain_scored, strict=True):
        np.testing.assert_array_equal(a, b)
    assert len(packed._packs) == len(_linears(packed))  # every linear layer ran packed
    assert all("forward" not in m.__dict__ for m in _linears(packed))


def test_packs_follow_the_weights_through_an_update(make_policy, model_dirs):
    plain = make_policy(model_dirs["llama"])
    packed = make_policy(model_dirs["llama"], packed_decode=True)
    _generate(packed)  # packs the initial weights
    batch = rollout_batch(plain)
    for policy in (plain, packed):
        policy.update(batch, algorithms.make("grpo").loss)
    _, expected = _generate(plain)
    _, generated = _generate(packed)
    assert [g.token_ids for g in generated] == [g.token_ids for g in expected]
    for gen, plain_gen in zip(generated, expected, strict=True):
        np.testing.assert_allclose(gen.logprobs, plain_gen.logprobs, atol=1e-4, rtol=0)


def test_packs_follow_the_weights_through_a_load(make_policy, model_dirs, tmp_path):
    trained = make_policy(model_dirs["llama"])
    trained.update(rollout_batch(trained), algorithms.make("grpo").loss)
    trained.save(tmp_path / "trained")
    packed = make_policy(model_dirs["llama"], packed_decode=True)
    _generate(packed)  # packs the initial weights
    packed.load(tmp_path / "trained")
    _, expected = _generate(trained)
    _, generated = _generate(packed)
    assert [g.token_ids for g in generated] == [g.token_ids for g in expected]
    for gen, trained_gen in zip(generated, expected, strict=True):
        np.testing.assert_allclose(gen.logprobs, trained_gen.logprobs, atol=1e-4, rtol=0)


def test_a_weight_changed_in_place_is_packed_again():
    layer = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8)
    packs = PackedWeights()
    with torch.no_grad(), packs.applied(layer):
        before = layer(x)
        layer.weight.mul_(2.0)
        after = layer(x)
    torch.testing.assert_close(after - layer.bias, 2 * (before - layer.bias), atol=1e-5, rtol=0)


def test_packed_kernels_run_one_use_at_a_time_and_keep_a_layers_own_forward():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    hooked = model[1].forward
    model[1].forward = hooked  # an instance forward, as a hook would set
    packs = PackedWeights()
    with torch.no_grad(), packs.applied(model):
        assert "forward" in model[0].__dict__ and model[1].forward is hooked
        model(torch.randn(3, 4))
        with pytest.raises(RuntimeError, match="already in use"), packs.applied(model):
            pass
        assert "forward" in model[0].__dict__  # the refused use unpatched nothing
    assert "forward" not in model[0].__dict__ and model[1].forward is hooked
    assert len(packs) == 1  # the hooked layer ran its own forward


def test_packed_decode_is_refused_with_the_vllm_backend(tmp_path):
    with pytest.raises(TypeError, match="packed_decode speeds up transformers sampling"):
        load_policy(tmp_path / "nowhere", rollout_backend="vllm", packed_decode=True)


def test_packed_kernels_refuse_to_run_with_gradients():
    packs = PackedWeights()
    with (
        pytest.raises(RuntimeError, match="without gradients"),
        packs.applied(torch.nn.Linear(2, 2)),
    ):
        pass


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        ({"device": "cuda"}, "device 'cuda'"),
        ({"dtype": "bfloat16"}, "dtype 'bfloat16'"),
        ({"autocast": "bfloat16"}, "autocast 'bfloat16'"),
    ],
)
def test_packed_decode_needs_float32_on_cpu(options, shown):
    with pytest.raises(ValueError, match=f"packed_decode needs .*{shown}"):
        HFPolicyOptions(packed_decode=True, **options)
