"""What the memory plan counts for attention (`memory_plan.attention`), by
`attn_implementation`, against the [L, L] tensors a tiny Qwen3 holds on CPU
(`benchmarks.perf.attention_memory`), and that a policy loads with the implementation it
names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from algorithms.training import memory_plan as mp
from algorithms.training.memory_plan.attention import ALIGNMENT_COPY
from benchmarks.perf import attention_memory as am
from graft_env.policies.options import ATTENTION_IMPLEMENTATIONS, HFPolicyOptions

QWEN = mp.paper_architecture("Qwen/Qwen3-1.7B-Base")
BUDGET, PROMPT, RESPONSE = 32768, 1024, 4096
SQUARE_TERMS = {"attention mask", ALIGNMENT_COPY, "eager attention scores"}


def terms(options: HFPolicyOptions, phase: str, response: int = RESPONSE) -> dict[str, float]:
    plan = mp.plan_policy(QWEN, options, mp.Workload(PROMPT, response, 256))
    return {term.name: term.bytes for term in plan.phases[phase]}


def options(**kwargs) -> HFPolicyOptions:
    return HFPolicyOptions(max_tokens_per_micro_batch=BUDGET, autocast="bfloat16", **kwargs)


def test_generation_prefill_holds_a_no_grad_forwards_mask_over_its_prompt_rows():
    """The prefill of generation_batch_size (64) left-padded prompts costs per mask entry what
    a no-grad scoring forward does; only the entries differ (64 x P^2 against T x L)."""
    for implementation in (None, "eager"):
        chosen = options(attn_implementation=implementation)
        generate, score = terms(chosen, "generate"), terms(chosen, "score")
        for name in score.keys() & SQUARE_TERMS:
            per_entry = score[name] / (BUDGET * (PROMPT + RESPONSE))
            assert generate[name] == pytest.approx(per_entry * 64 * PROMPT**2)


@pytest.mark.parametrize(
    "implementation", ["flash_attention_2", "flash_attention_3", "flex_attention"]
)
def test_flash_and_flex_attention_hold_no_mask(implementation):
    for phase in mp.PHASES:
        names = terms(options(attn_implementation=implementation, padding_free=True), phase)
        assert not SQUARE_TERMS & set(names)


@given(st.sampled_from(ATTENTION_IMPLEMENTATIONS), st.booleans(), st.sampled_from(mp.PHASES))
def test_flash_never_needs_more_than_any_other_implementation(implementation, packed, phase):
    def total(name):
        return sum(terms(options(attn_implementation=name, padding_free=packed), phase).values())

    assert total("flash_attention_2") <= total(implementation)


@pytest.mark.parametrize(
    ("packed", "response"), [(True, RESPONSE), (False, RESPONSE), (False, 4095)]
)
def test_cuda_memory_efficient_sdpa_adds_one_padded_copy_of_the_mask(packed, response):
    """Its own term, for sdpa and null only, in scoring and the checkpointed update: one bf16
    copy of a forward's mask (32,768 rows of L columns, or N = 32,768 packed: 2 GiB); at
    L = 5,119, 5,119 columns plus the one the layer's saved copy is padded by (to 5,120, a
    multiple of 8)."""
    columns = BUDGET if packed else PROMPT + RESPONSE
    for implementation in (None, "sdpa"):
        chosen = options(
            attn_implementation=implementation, padding_free=packed, gradient_checkpointing=True
        )
        for phase in ("score", "update"):
            assert terms(chosen, phase, response)[ALIGNMENT_COPY] == 2 * BUDGET * columns
    assert ALIGNMENT_COPY not in terms(options(attn_implementation="eager"), "update")


def test_without_checkpointing_every_saved_copy_is_padded():
    """L = 5,119 in rows of a 32,768-token update: the extra copy at 5,119 columns and 28
    layers' saved copies one column wider (5,120) than the CPU's."""
    planned = terms(options(gradient_checkpointing=False), "update", 4095)[ALIGNMENT_COPY]
    assert planned == 2 * BUDGET * (PROMPT + 4095 + QWEN.num_layers)


MEASURED = [
    (implementation, precision, packed, aligned)
    for implementation, aligned in (("sdpa", True), ("eager", True), ("sdpa", False))
    for precision in am.PRECISIONS
    for packed in (False, True)
]
MEASURED_NAMES = ("implementation", "precision", "packed", "aligned")


@pytest.mark.parametrize(MEASURED_NAMES, MEASURED)
def test_each_layer_saves_for_backward_the_square_bytes_the_plan_counts(
    implementation, precision, packed, aligned
):
    """Autograd's saved [L, L] tensors per layer of a tiny Qwen3's update (the project's
    forward, padded rows or padding_free, L = 48 / 47, N = 96 / 94): sdpa's additive copy of
    the mask; eager's float32 softmax and, below float32, its compute-dtype copy, per head."""
    case = am.Case(implementation, precision, "update", packed, aligned=aligned)
    measured = am.measure(case)["saved"]
    assert measured == [am.planned(case)["saved_per_layer"]] * am.TINY_QWEN3["num_hidden_layers"]


@pytest.mark.parametrize(("phase", "checkpointing"), [("score", False), ("update", False),
                                                      ("update", True)])  # fmt: skip
@pytest.mark.parametrize(MEASURED_NAMES, MEASURED)
def test_the_plans_attention_terms_bound_the_square_tensors_alive_at_once(
    implementation, precision, packed, aligned, phase, checkpointing
):
    """The most [L, L] bytes alive at once over a tiny Qwen3's forward (and backward): the
    plan's attention terms the CPU holds equal it for sdpa, at L (or N) a multiple of 8 or not,
    and bound it within 25% for eager (which counts the CPU's float32 temporary of a
    mixed-dtype add under autocast, and every layer's saved tensors beside the layer in
    backward's gradients). Measured op by op on CPU, which makes no alignment copy: the plan's
    `ALIGNMENT_COPY` for sdpa is left out here and counted on CUDA, where `gpu_probes` (c) runs
    the same comparison."""
    case = am.Case(implementation, precision, phase, packed, checkpointing, aligned)
    measured, planned = am.measure(case)["peak"], am.planned(case, "cpu")
    if implementation == "sdpa":
        assert planned["peak"] == measured and planned["alignment_copy"] > 0
        assert am.planned(case, "cuda")["peak"] == measured + planned["alignment_copy"]
    assert measured <= planned["peak"] <= 1.25 * measured


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
