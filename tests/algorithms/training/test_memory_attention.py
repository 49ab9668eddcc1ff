"""What the memory plan counts for attention (`memory_plan.attention`), by
`attn_implementation`, against the [L, L] tensors a tiny Qwen3 holds on CPU
(`benchmarks.perf.attention_memory`), and that a policy loads with the implementation it
names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from algorithms.training import memory_plan as mp
from benchmarks.perf import attention_memory as am
from graft_env.policies.options import ATTENTION_IMPLEMENTATIONS, HFPolicyOptions

QWEN = mp.paper_architecture("Qwen/Qwen3-1.7B-Base")
BUDGET, PROMPT, RESPONSE = 32768, 1024, 4096


def terms(options: HFPolicyOptions, phase: str) -> dict[str, float]:
    plan = mp.plan_policy(QWEN, options, mp.Workload(PROMPT, RESPONSE, 256))
    return {term.name: term.bytes for term in plan.phases[phase]}


def options(**kwargs) -> HFPolicyOptions:
    return HFPolicyOptions(max_tokens_per_micro_batch=BUDGET, autocast="bfloat16", **kwargs)


def test_generation_prefill_holds_a_no_grad_forwards_mask_over_its_prompt_rows():
    """The prefill of generation_batch_size (64) left-padded prompts costs per mask entry what
    a no-grad scoring forward does; only the entries differ (64 x P^2 against T x L)."""
    for implementation in (None, "eager"):
        chosen = options(attn_implementation=implementation)
        generate, score = terms(chosen, "generate"), terms(chosen, "score")
        for name in score.keys() & {"attention mask", "eager attention scores"}:
            per_entry = score[name] / (BUDGET * (PROMPT + RESPONSE))
            assert generate[name] == pytest.approx(per_entry * 64 * PROMPT**2)


@pytest.mark.parametrize(
    "implementation", ["flash_attention_2", "flash_attention_3", "flex_attention"]
)
def test_flash_and_flex_attention_hold_no_mask(implementation):
    for phase in mp.PHASES:
        names = terms(options(attn_implementation=implementation, padding_free=True), phase)
        assert not {"attention mask", "eager attention scores"} & set(names)


@given(st.sampled_from(ATTENTION_IMPLEMENTATIONS), st.booleans(), st.sampled_from(mp.PHASES))
def test_flash_never_needs_more_than_any_other_implementation(implementation, packed, phase):
    def total(name):
        return sum(terms(options(attn_implementation=name, padding_free=packed), phase).values())

    assert total("flash_attention_2") <= total(implementation)


MEASURED = [
    (implementation, precision, packed)
    for implementation in ("sdpa", "eager")
    for precision in am.PRECISIONS
    for packed in (False, True)
]


@pytest.mark.parametrize(("implementation", "precision", "packed"), MEASURED)
def test_each_layer_saves_for_backward_the_square_bytes_the_plan_counts(
    implementation, precision, packed
):
    """Autograd's saved [L, L] tensors per layer of a tiny Qwen3's update (the project's
    forward, padded rows or padding_free): sdpa's additive copy of the mask; eager's float32
    softmax and, below float32, its compute-dtype copy, per head."""
    case = am.Case(implementation, precision, "update", packed)
    measured = am.measure(case)["saved"]
    assert measured == [am.planned(case)["saved_per_layer"]] * am.TINY_QWEN3["num_hidden_layers"]


@pytest.mark.parametrize(("phase", "checkpointing"), [("score", False), ("update", False),
                                                      ("update", True)])  # fmt: skip
@pytest.mark.parametrize(("implementation", "precision", "packed"), MEASURED)
def test_the_plans_attention_terms_bound_the_square_tensors_alive_at_once(
    implementation, precision, packed, phase, checkpointing
):
    """The most [L, L] bytes alive at once over a tiny Qwen3's forward (and backward): the
    plan's attention terms for that shape equal it for sdpa and bound it within 25% for eager
    (which counts the CPU's float32 temporary of a mixed-dtype add under autocast, and every
    layer's saved tensors beside the layer in backward's gradients). Measured op by op on CPU;
    CUDA's SDPA kernels may hold otherwise: `gpu_probes` (c) runs the same comparison there."""
    case = am.Case(implementation, precision, phase, packed, checkpointing)
    measured, planned = am.measure(case)["peak"], am.planned(case)["peak"]
    if implementation == "sdpa":
        assert planned == measured
    assert measured <= planned <= 1.25 * measured


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
