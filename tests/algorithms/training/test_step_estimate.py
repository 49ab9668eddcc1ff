"""The step-time estimate (`algorithms.training.step_estimate`): its measured inputs are the
committed H200 figures, it reproduces them on the measured model, and its arithmetic has the
properties a step time must have (more GPUs never slower, longer responses never faster,
phases that sum to the total)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.training import memory_plan as mp
from algorithms.training.memory_plan.reserves import VLLM_WORKSPACE_BYTES
from algorithms.training.step_estimate import estimate_bounds, estimate_step
from algorithms.training.step_time.anchors import (
    GPUS,
    MEASURED,
    MEASURED_ARCH,
    MEASURED_GPU,
    MFU_BOUNDS,
    SYNC_CALL_S,
    VLLM_STEP_OVERHEAD_S,
    gpu_for,
    hbm_bytes_per_s,
    link_bytes_per_s,
    vllm_kv_bytes_per_token,
)
from algorithms.training.step_time.gpu_memory import per_gpu_bytes, vllm_engine_memory
from algorithms.training.step_time.phases import (
    eager_rollout_s,
    update_micro_batches,
    update_s,
    vllm_peak_kv_tokens,
    vllm_rollout_s,
    weight_sync_s,
)
from algorithms.training.step_time.table import format_estimate, format_range
from algorithms.training.step_time.totals import ROLLOUT_ROWS
from algorithms.training.step_time.workload import Agent, LengthMix, StepWorkload
from graft_env.policies.options import HFPolicyOptions

REPO = Path(__file__).resolve().parents[3]
MEASURED_BLOCK_ROWS = 64
MEASURED_JSON = REPO / "docs" / "results" / "gpu_check_h200" / "device_check_lr1e-6.json"
SMOLLM3 = mp.paper_architecture("HuggingFaceTB/SmolLM3-3B-Base")
QWEN3 = mp.paper_architecture("Qwen/Qwen3-1.7B-Base")
PAPER_OPTIONS = HFPolicyOptions(
    device="cuda",
    autocast="bfloat16",
    gradient_checkpointing=True,
    generation_batch_size=64,
    score_batch_size=16,
    max_tokens_per_micro_batch=32768,
    logits_chunk_tokens=4096,
)


def pair(gpus: int, backend: str = "vllm") -> list[Agent]:
    return [
        Agent("smollm3", SMOLLM3, PAPER_OPTIONS, gpus, gpus > 1, backend),
        Agent("qwen3", QWEN3, PAPER_OPTIONS, gpus, gpus > 1, backend),
    ]


def workload(prompts: int = 128, cap: int = 4096) -> StepWorkload:
    return StepWorkload(prompts=prompts, mix=LengthMix(cap=cap))


def test_the_measured_inputs_are_the_committed_h200_figures():
    """Every measured constant is read back from docs/results/gpu_check_h200."""
    run = json.loads(MEASURED_JSON.read_text())
    model = run["mixed"]["models"]["scale-llama"]
    assert MEASURED_ARCH.params == model["parameters"] == run["scale_build"]["parameters"]
    assert MEASURED.update_s == model["gradient_checkpointing"]["update_s"]
    assert MEASURED.generate_s == model["sampling"]["generate_s"]
    settings_ = run["settings"]
    rows = settings_["prompts"] * settings_["n"]
    assert MEASURED.update_rows == model["sampling"]["sequences"] == rows
    assert MEASURED.update_width == settings_["max_new_tokens"]
    # the JSON does not record the block size: the check ran with HFPolicyOptions' default of
    # its commit (8cf8e8d, graft_env/policies/hf_options.py: generation_batch_size = 64)
    blocks = rows // MEASURED_BLOCK_ROWS
    assert MEASURED.decode_steps == blocks * settings_["max_new_tokens"]
    assert MEASURED.decode_rows == MEASURED_BLOCK_ROWS
    assert run["environment"]["device"] == "NVIDIA H200"


@pytest.mark.parametrize("checkpointing", [True, False])
def test_the_estimate_gives_back_the_measured_updates_on_the_measured_model(checkpointing):
    """Calibration through `update_s` on the measured workload (16 prompts x 8, every row its
    ~8-token prompt + 128 new tokens, one micro-batch): the checkpointed update (the rate's
    source, 4 forward-equivalents) and, independently, the plain one (3 forward-equivalents;
    its time is not an input) come out within 2 % of the committed H200 times."""
    model = json.loads(MEASURED_JSON.read_text())["mixed"]["models"]["scale-llama"]
    measured = model["gradient_checkpointing" if checkpointing else "update"]["update_s"]
    options = HFPolicyOptions(autocast="bfloat16", gradient_checkpointing=checkpointing)
    agent = Agent("scale-llama", MEASURED_ARCH, options)
    mix = LengthMix(prompt_tokens=8, cap=128, cut_share=1.0)  # every row padded to the cap
    work = StepWorkload(prompts=16, n=8, num_minibatches=1, padding=1.0, mix=mix)
    assert update_micro_batches(agent, work) == 1
    assert update_s(agent, MEASURED_GPU, work) == pytest.approx(measured, rel=0.02)


def test_the_estimate_gives_back_the_measured_rollout_on_the_measured_model():
    options = HFPolicyOptions(autocast="bfloat16", gradient_checkpointing=True)
    agent = Agent("scale-llama", MEASURED_ARCH, options)
    # 80 % of the rows ran to the 128-token cap (stopped_share 0.195): 2 blocks x 128 steps
    mix = LengthMix(prompt_tokens=8, cap=128, cut_share=0.805, median=60, sigma=0.5)
    work = StepWorkload(prompts=16, n=8, mix=mix)
    rollout = eager_rollout_s(agent, MEASURED_GPU, work)
    assert rollout == pytest.approx(MEASURED.generate_s, rel=0.05)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(32, 256),
    st.sampled_from([1024, 2048, 4096, 8192]),
    st.sampled_from([1, 2]),
    st.sampled_from(list(GPUS)),
)
def test_doubling_the_gpus_per_agent_never_slows_a_step(prompts, cap, gpus, kind):
    gpu, work = GPUS[kind], workload(prompts, cap)
    fewer = estimate_step(pair(gpus), gpu, work)
    more = estimate_step(pair(2 * gpus), gpu, work)
    for backend in ROLLOUT_ROWS:
        assert more.total_with(backend) <= fewer.total_with(backend)
    for slow, fast in zip(fewer.phases, more.phases, strict=True):
        if slow.name in ("rollout", "scoring", "update"):
            assert fast.seconds <= slow.seconds, slow.name
    for name in ROLLOUT_ROWS.values():
        assert more.alternatives[name].seconds <= fewer.alternatives[name].seconds, name


def test_the_update_spreads_over_the_gpus():
    """Twice the GPUs: the update's FLOPs take half the time (collectives on top)."""
    gpu, work = GPUS["h200"], workload()
    one, two = (update_s(pair(k)[0], gpu, work) for k in (1, 2))
    assert 0.5 * one <= two <= 0.55 * one


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([512, 1024, 2048, 4096]), st.integers(1, 4096), st.sampled_from([1, 2]))
def test_longer_responses_never_take_less_time(cap, extra, gpus):
    gpu = GPUS["h200"]
    shorter = estimate_step(pair(gpus), gpu, workload(cap=cap))
    longer = estimate_step(pair(gpus), gpu, workload(cap=cap + extra))
    for backend in ROLLOUT_ROWS:
        assert longer.total_with(backend) > shorter.total_with(backend)
    for short, long in zip(shorter.phases, longer.phases, strict=True):
        assert long.seconds >= short.seconds, short.name


@pytest.mark.parametrize("backends", [("vllm", "vllm"), ("vllm", "transformers")])
def test_the_phases_sum_to_the_total(backends):
    agents = [
        dataclasses.replace(a, rollout_backend=b) for a, b in zip(pair(2), backends, strict=True)
    ]
    estimate = estimate_step(agents, GPUS["h200"], workload())
    assert estimate.total == pytest.approx(sum(p.seconds for p in estimate.phases))
    assert [p.name for p in estimate.phases] == [
        "rollout", "verify", "scoring", "update", "weight sync", "exchange"
    ]  # fmt: skip
    rollout = estimate.phases[0]
    eager = estimate.alternatives[ROLLOUT_ROWS["transformers"]]
    vllm = estimate.alternatives[ROLLOUT_ROWS["vllm"]]
    for i, backend in enumerate(backends):
        chosen = vllm if backend == "vllm" else eager
        assert rollout.per_agent[i] == chosen.per_agent[i]
    if backends[0] == backends[1]:
        assert estimate.total_with(backends[0]) == pytest.approx(estimate.total)
    # concurrent phases take the slowest agent, sequential ones the sum
    update = estimate.phases[3]
    assert update.seconds == max(update.per_agent)
    scoring = estimate.phases[2]
    assert scoring.seconds == pytest.approx(sum(scoring.per_agent))


@pytest.mark.parametrize("backend", ["transformers", "vllm"])
def test_a_larger_kv_cache_decodes_slower(backend):
    """Both rollouts read every live row's KV cache each step: twice the KV heads, slower."""
    agent, gpu, work = pair(2)[1], GPUS["h200"], workload()
    wider = dataclasses.replace(agent, arch=dataclasses.replace(QWEN3, num_kv_heads=16))
    rollout = eager_rollout_s if backend == "transformers" else vllm_rollout_s
    assert rollout(wider, gpu, work) > 1.02 * rollout(agent, gpu, work)


TURNS = ("rollout", "update", "weight sync")


def test_in_one_process_the_agents_take_turns():
    """The local backend (every policy in the driver): rollout, update and sync are the sum over
    agents, not the slowest agent; the phases still sum to the total."""
    gpu, work = GPUS["h200"], workload()
    apart = estimate_step(pair(1), gpu, work)
    turns = estimate_step(pair(1), gpu, work, together=False)
    for a, t in zip(apart.phases, turns.phases, strict=True):
        assert a.seconds == (max(a.per_agent) if a.name in TURNS else t.seconds)
        if a.name in TURNS:
            assert t.seconds == pytest.approx(sum(t.per_agent))
    assert turns.total == pytest.approx(sum(p.seconds for p in turns.phases))
    assert turns.total > apart.total


def test_vllm_slows_down_when_its_kv_cache_does_not_fit():
    agent, gpu, work = pair(2)[0], GPUS["h100-80gb"], workload()
    needed = vllm_peak_kv_tokens(work, agent.max_num_seqs)
    needed *= vllm_kv_bytes_per_token(SMOLLM3, agent.gpus)
    roomy = vllm_rollout_s(agent, gpu, work, kv_available=2 * needed)
    assert roomy == vllm_rollout_s(agent, gpu, work)
    assert vllm_rollout_s(agent, gpu, work, kv_available=needed / 4) > 3 * roomy


def test_fsdp_divides_only_the_sharded_state():
    work = mp.Workload(1024, 4096, 256)
    plan = mp.plan_policy(QWEN3, PAPER_OPTIONS, work)
    one, two = per_gpu_bytes(plan, 1), per_gpu_bytes(plan, 2)
    for phase in mp.PHASES:
        assert one[phase] == pytest.approx(plan.persistent_bytes + plan.transient(phase))
        state = 3 * QWEN3.params * 4 + (QWEN3.params * 4 if phase == "update" else 0)
        assert one[phase] - two[phase] == pytest.approx(state / 2)  # weights, moments, grads


def test_the_table_names_every_phase_and_the_target():
    estimate = estimate_step(pair(2, "transformers"), GPUS["h200"], workload())
    text = "\n".join(format_estimate(estimate))
    for name in ("rollout", "verify", "scoring", "update", "weight sync", "exchange"):
        assert f"  {name} " in text
    assert ROLLOUT_ROWS["vllm"] in text and ROLLOUT_ROWS["transformers"] in text
    assert text.count("the target (<= 1.5 x 4 min = 6 min)") == 2
    assert "every agent on vllm" in text


def test_a_gpu_kind_outside_the_table_is_refused():
    with pytest.raises(ValueError, match="--gpu-kind: 'v100' is not one of"):
        gpu_for(80, "v100")
    assert gpu_for(141).name == "h200" and gpu_for(80).name == "h100-80gb"


def test_vllm_decodes_at_most_max_num_seqs_rows_at_once():
    """A5's slots: rows beyond `max_num_seqs` wait for a free slot, so fewer slots never decode
    faster; with as many slots as rows it is every row at once (more slots change nothing)."""
    gpu, work = GPUS["h200"], workload()  # 1,024 rows
    agent = pair(2)[1]
    seconds = {
        slots: vllm_rollout_s(dataclasses.replace(agent, max_num_seqs=slots), gpu, work)
        for slots in (64, 256, 1024, 4096)
    }
    assert seconds[64] > seconds[256] > seconds[1024] == seconds[4096]
    # the queue's rows cost at least their tokens at the full slots' step, beyond the last 256
    busy = (work.rows - 256) * work.mix.mean_response / 256
    assert seconds[256] - seconds[1024] > 0.2 * busy * VLLM_STEP_OVERHEAD_S
    # the KV held at once: the slots' rows, not every row
    assert vllm_peak_kv_tokens(work, 256) < vllm_peak_kv_tokens(work, 1024)
    assert vllm_peak_kv_tokens(work, 1024) == vllm_peak_kv_tokens(work)


def test_the_weight_sync_gathers_float32_shards_in_the_options_buckets():
    """A9: `DTensor.full_tensor()` of the fp32 master weights: halving the link's bandwidth
    adds 4 bytes x params x (k-1)/k of transfer; a smaller `vllm_sync_bucket_mb` adds calls."""
    gpu = GPUS["h200"]
    agent = pair(2)[0]
    slow = dataclasses.replace(gpu, nvlink_gb_s=gpu.nvlink_gb_s / 2)
    extra = weight_sync_s(agent, slow) - weight_sync_s(agent, gpu)
    assert extra == pytest.approx(4 * SMOLLM3.params / 2 / link_bytes_per_s(gpu))
    small = dataclasses.replace(agent, sync_bucket_mb=128.0)
    buckets = (2 * SMOLLM3.params / 2**20 / 128, 2 * SMOLLM3.params / 2**20 / 512)
    calls = weight_sync_s(small, gpu) - weight_sync_s(agent, gpu)
    assert calls == pytest.approx((math.ceil(buckets[0]) - math.ceil(buckets[1])) * SYNC_CALL_S)


def test_the_engine_memory_is_its_preallocated_share():
    """A5: with `vllm_kv_cache_gib` null the engine holds `vllm_gpu_memory_utilization` x the
    GPU whatever the rows, its KV the share less its weights and workspace; with it set, its
    weights, that KV and the workspace."""
    from algorithms.training.ray.engine_settings import engine_settings, rank_update_peak

    work, capacity = mp.Workload(1024, 4096, 256), 141 * mp.GIB
    plan = mp.plan_policy(QWEN3, PAPER_OPTIONS, work)
    resident, _ = rank_update_peak(plan, 2)
    options = {"device": "cuda", "autocast": "bfloat16", "dtype": "float32"}
    for share in (0.3, 0.5):
        settings = engine_settings(
            1, {**options, "vllm_gpu_memory_utilization": share}, 4096, 2,
            architecture=QWEN3, work=work, capacity=capacity,
        )  # fmt: skip
        memory = vllm_engine_memory(plan, 2, settings, None)
        assert memory.sampling_bytes == pytest.approx(resident + share * capacity)
        weights = 2 * QWEN3.params / 2
        assert memory.kv_bytes == pytest.approx(share * capacity - weights - VLLM_WORKSPACE_BYTES)
    fixed = vllm_engine_memory(plan, 2, settings, 3.0)
    assert fixed.kv_bytes == 3 * mp.GIB
    assert fixed.sampling_bytes == pytest.approx(
        resident + weights + 3 * mp.GIB + VLLM_WORKSPACE_BYTES
    )


def test_the_measured_rate_moved_to_an_mfu_is_that_share_of_the_peak():
    for mfu in (*MFU_BOUNDS, MEASURED.mfu):
        moved = MEASURED.at_mfu(mfu)
        assert moved.flops_per_s == pytest.approx(mfu * MEASURED_GPU.bf16_tflops * 1e12)
        assert moved.layer_overhead_s == MEASURED.layer_overhead_s  # decoding is not A3's
    assert MFU_BOUNDS[0] < MEASURED.mfu < MFU_BOUNDS[1]


@pytest.mark.parametrize("kind", sorted(GPUS))
def test_the_bounds_bracket_the_estimate_and_move_only_the_training_terms(kind):
    """At A3's bounds every phase that rests on the training rate moves the opposite way to
    the MFU, and nothing else moves: the vLLM rollout, its sync, verify and exchange."""
    gpu, work = GPUS[kind], workload()
    estimate = estimate_step(pair(2), gpu, work)
    fast, slow = estimate_bounds(pair(2), gpu, work)
    assert fast.total < estimate.total < slow.total
    for mid, f, s in zip(estimate.phases, fast.phases, slow.phases, strict=True):
        if mid.name in ("scoring", "update"):
            assert f.seconds < mid.seconds < s.seconds, mid.name
        else:
            assert f.seconds == mid.seconds == s.seconds, mid.name
    same = estimate_step(pair(2), gpu, work, measured=MEASURED.at_mfu(MEASURED.mfu))
    assert same.total == pytest.approx(estimate.total)


def test_the_range_says_what_rests_on_the_rate_and_that_vllm_is_not_measured():
    gpu, work = GPUS["h200"], workload()
    estimate = estimate_step(pair(2), gpu, work)
    text = "\n".join(format_range(estimate, *estimate_bounds(pair(2), gpu, work)))
    assert "of the step is scoring + update at A3's one measured rate (12.4% MFU" in text
    assert "at A3's bounds, 25% to 6% MFU" in text
    assert "not measured: the vLLM rollout (A5; smollm3, qwen3)" in text
    eager = estimate_step(pair(2, "transformers"), gpu, work)
    text = "\n".join(format_range(eager, *estimate_bounds(pair(2, "transformers"), gpu, work)))
    assert "not measured" not in text


def test_asleep_at_level_2_nothing_of_the_sync_crosses_to_the_host():
    """A9 under the engine lifecycle: the sync rewrites every weight, so the engine sleeps at
    level 2 and no weight goes to host memory and back; on one GPU (nothing to gather) the sync
    is its bucket writes, the engine worker's clone and shard write, and the calls."""
    gpu, agent = GPUS["h200"], pair(1)[0]
    weights = 2 * SMOLLM3.params
    calls = math.ceil(weights / 2**20 / agent.sync_bucket_mb) * SYNC_CALL_S
    assert weight_sync_s(agent, gpu) == pytest.approx(5 * weights / hbm_bytes_per_s(gpu) + calls)
