"""What the memory plan counts for attention (`memory_plan.attention`), by
`attn_implementation`, and that a policy loads with the implementation it names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from algorithms.training import memory_plan as mp
from graft_env.policies.options import ATTENTION_IMPLEMENTATIONS, HFPolicyOptions

QWEN = mp.paper_architecture("Qwen/Qwen3-1.7B-Base")
BUDGET, PROMPT, RESPONSE = 32768, 1024, 4096


def terms(options: HFPolicyOptions, phase: str) -> dict[str, float]:
    plan = mp.plan_policy(QWEN, options, mp.Workload(PROMPT, RESPONSE, 256))
    return {term.name: term.bytes for term in plan.phases[phase]}


def options(**kwargs) -> HFPolicyOptions:
    return HFPolicyOptions(max_tokens_per_micro_batch=BUDGET, autocast="bfloat16", **kwargs)


@pytest.mark.parametrize("phase", ["score", "update"])
def test_sdpa_counts_a_bool_mask_of_tokens_by_row_length_or_tokens_squared_packed(phase):
    for implementation in (None, "sdpa"):
        padded = terms(options(attn_implementation=implementation), phase)
        assert padded["attention mask"] == BUDGET * (PROMPT + RESPONSE)  # rows x L x L
        packed = terms(options(attn_implementation=implementation, padding_free=True), phase)
        assert packed["attention mask"] == BUDGET**2  # one [1, 1, N, N] mask: 1 GiB
        assert "eager attention scores" not in padded


def test_generation_counts_the_prefill_mask_of_its_rows():
    generate = terms(options(), "generate")
    assert generate["attention mask"] == 64 * PROMPT**2  # generation_batch_size rows


@pytest.mark.parametrize(
    "implementation", ["flash_attention_2", "flash_attention_3", "flex_attention"]
)
def test_flash_and_flex_attention_hold_no_mask(implementation):
    for phase in mp.PHASES:
        names = terms(options(attn_implementation=implementation, padding_free=True), phase)
        assert not {"attention mask", "eager attention scores"} & set(names)


def test_eager_holds_every_layers_scores_for_backward_and_one_when_checkpointed():
    entries = BUDGET * (PROMPT + RESPONSE)
    full = terms(options(attn_implementation="eager"), "update")
    assert full["attention mask"] == entries * 2  # in the bfloat16 compute dtype
    assert full["eager attention scores"] == QWEN.num_layers * QWEN.num_heads * entries * 2
    checkpointed = terms(
        options(attn_implementation="eager", gradient_checkpointing=True), "update"
    )
    assert checkpointed["eager attention scores"] == QWEN.num_heads * entries * 2
    score = terms(options(attn_implementation="eager"), "score")
    assert score["eager attention scores"] == QWEN.num_heads * entries * (2 + 4)  # + fp32 softmax


@given(st.sampled_from(ATTENTION_IMPLEMENTATIONS), st.booleans(), st.sampled_from(mp.PHASES))
def test_flash_never_needs_more_than_any_other_implementation(implementation, packed, phase):
    def total(name):
        return sum(terms(options(attn_implementation=name, padding_free=packed), phase).values())

    assert total("flash_attention_2") <= total(implementation)


def test_a_policy_loads_with_the_attention_it_names(tiny_model_dir):
    from graft_env.policies.loading import load_model

    for implementation, loaded in ((None, "sdpa"), ("eager", "eager"), ("sdpa", "sdpa")):
        chosen = HFPolicyOptions(attn_implementation=implementation)
        assert load_model(str(tiny_model_dir), chosen).config._attn_implementation == loaded


def test_flash_attention_without_its_package_is_one_line_naming_the_model(tiny_model_dir):
    pytest.importorskip("transformers")
    from transformers.utils import is_flash_attn_2_available

    from graft_env.policies.loading import load_model

    if is_flash_attn_2_available():
        pytest.skip("flash-attn is installed here")
    chosen = HFPolicyOptions(attn_implementation="flash_attention_2")
    with pytest.raises(
        ValueError, match=r"^cannot load a causal LM from '.*': .*FlashAttention"
    ) as error:
        load_model(str(tiny_model_dir), chosen)
    assert "\n" not in str(error.value)
