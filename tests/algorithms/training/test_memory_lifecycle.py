"""One worker-group GPU through the engine lifecycle (`memory_plan.lifecycle`), on pure inputs
(the paper models' published shapes, no weights): where the engine's share is held, what the
caching allocator keeps and `empty_cache` returns, the reserves, the load path; and the
allocator advice for vLLM agents (`memory_plan.launch`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from hypothesis import given
from hypothesis import strategies as st

from algorithms.training import memory_plan as mp
from algorithms.training.memory_plan import lifecycle, reserves
from algorithms.training.memory_plan.launch import VLLM_FLOOR, allocator_advice
from algorithms.training.run_config import load_config
from graft_env.policies.options import HFPolicyOptions

GIB = mp.GIB
SMOLLM3 = mp.paper_architecture("HuggingFaceTB/SmolLM3-3B-Base")
REPO = Path(__file__).resolve().parents[3]
PAPER = mp.policy_options(  # SmolLM3's options in the shipped worker-group paper config
    load_config(REPO / "configs" / "paper_smollm3_qwen3.yaml").agents[0].options
)
WORK = mp.Workload(1024, 4096, 256)
ENGINE_ROWS = ("vLLM weights / TP", "vLLM KV cache", "vLLM activation workspace")


def engine(sleeps: bool = True, kv: float = 30 * GIB, tp: int = 2) -> lifecycle.Engine:
    weights = SMOLLM3.params * 2 / tp
    return lifecycle.Engine(
        weight_bytes=weights,
        kv_bytes=kv,
        workspace_bytes=reserves.VLLM_WORKSPACE_BYTES,
        tensor_parallel=tp,
        sleeps=sleeps,
        cuda_graphs=True,
        staging_bytes=0.5 * GIB,
        share_knob="vllm_gpu_memory_utilization",
    )


def gpu(options: HFPolicyOptions = PAPER, ranks: int = 2, **kwargs) -> lifecycle.GpuPlan:
    plan = mp.plan_policy(SMOLLM3, options, WORK)
    return lifecycle.rank_gpu_plan(plan, ranks, engine(**kwargs))


def row(plan: lifecycle.GpuPlan, name: str) -> dict[str, float]:
    (found,) = [r for r in plan.rows if r.name == name]
    return dict(found.cells)


def test_asleep_the_engine_holds_nothing_of_its_share_through_score_and_update():
    plan = gpu()
    assert plan.phases == lifecycle.LIFECYCLE
    for name in ENGINE_ROWS:
        assert not {"load", "score", "update"} & set(row(plan, name))
    assert set(row(plan, "vLLM KV cache")) == {"generate", lifecycle.WAKE_KV}
    assert set(row(plan, "vLLM weights / TP")) == {
        "generate", lifecycle.WAKE_WEIGHTS, lifecycle.SYNC, lifecycle.WAKE_KV
    }  # fmt: skip
    # what sleep keeps: the worker's context, its TP communicator and the CUDA-graph pool
    for name in ("CUDA context, vLLM worker", "NCCL, vLLM TP group", "CUDA-graph pool (vLLM)"):
        assert set(row(plan, name)) == set(lifecycle.LIFECYCLE[1:])


def test_without_sleep_mode_the_share_is_beside_score_and_update():
    awake, asleep = gpu(sleeps=False), gpu()
    assert lifecycle.WAKE_WEIGHTS not in awake.phases and lifecycle.SYNC in awake.phases
    share = 30 * GIB + SMOLLM3.params + reserves.VLLM_WORKSPACE_BYTES  # KV + weights / 2 + ws
    for phase in ("score", "update"):
        assert awake.total(phase) - asleep.total(phase) == pytest.approx(share)


@given(
    response=st.integers(256, 8192),
    budget=st.sampled_from([8192, 16384, 32768, 65536]),
    chunk=st.sampled_from([None, 1024, 4096]),
    ranks=st.sampled_from([2, 4, 8]),
)
def test_empty_cache_returns_all_the_update_left_above_the_shards(response, budget, chunk, ranks):
    """The allocator keeps the larger of the scoring and update peaks until `empty_cache`;
    what it returns is that peak less the resident shards, and waking the weights after it
    needs the shards, the engine's weights and the reserves only."""
    options = HFPolicyOptions(
        autocast="bfloat16",
        gradient_checkpointing=True,
        max_tokens_per_micro_batch=max(budget, 1024 + response),
        logits_chunk_tokens=chunk,
    )
    work = mp.Workload(1024, response, 256)
    plan = mp.plan_policy(SMOLLM3, options, work)
    resident = sum(t.bytes for t in plan.persistent) / ranks
    alone = lifecycle.rank_gpu_plan(plan, ranks, None)  # transformers: no engine rows
    trainer = {p: alone.total(p) - reserves.NCCL_COMMUNICATOR_BYTES for p in ("score", "update")}
    with_engine = lifecycle.rank_gpu_plan(plan, ranks, engine(tp=ranks))
    assert with_engine.returned_by_empty_cache == pytest.approx(max(trainer.values()) - resident)
    assert alone.total("update") >= alone.total("score") - 1  # the scoring peak stays cached
    held = with_engine.total(lifecycle.WAKE_WEIGHTS)
    fixed = sum(
        r.cells.get(lifecycle.WAKE_WEIGHTS, 0.0) for r in with_engine.rows if "vLLM" in r.name
    )
    assert held == pytest.approx(
        resident + reserves.NCCL_COMMUNICATOR_BYTES + fixed, rel=1e-9
    )  # nothing of the update: it went back with empty_cache


def test_the_load_spike_of_the_old_path_is_the_whole_float32_model():
    plan = gpu()
    weights = SMOLLM3.params * 4
    largest = SMOLLM3.vocab_size * SMOLLM3.hidden_size * 4
    assert plan.total("load") == pytest.approx(
        weights / 2 + largest + reserves.NCCL_COMMUNICATOR_BYTES
    )
    assert plan.load_full_copy - plan.total("load") == pytest.approx(weights - largest)


def test_the_sync_holds_one_bucket_its_clone_and_one_whole_tensor_beside_the_engine_weights():
    plan = gpu()
    extra = plan.total(lifecycle.SYNC) - plan.total(lifecycle.WAKE_WEIGHTS)
    assert extra == pytest.approx(2 * 0.5 * GIB + SMOLLM3.vocab_size * SMOLLM3.hidden_size * 4)


def test_the_paper_smollm3_gpu_fits_80_gib_only_with_empty_cache_before_waking():
    """The issue's finding on pure inputs: at 80 GiB (78 usable) waking weights and KV at once
    while the allocator still holds the update's peak does not fit; the lifecycle does."""
    usable = 80 * GIB - reserves.RESERVE_BYTES
    kv = 0.5 * 80 * GIB - SMOLLM3.params - reserves.VLLM_WORKSPACE_BYTES  # util 0.5, TP 2
    plan = gpu(kv=kv)
    assert plan.total(plan.peak_phase()) <= usable
    assert plan.total(lifecycle.WAKE_KV) + plan.returned_by_empty_cache > usable


def test_one_process_per_gpu_keeps_the_2_gib_reserve():
    assert reserves.RESERVE_BYTES == 2 * GIB == mp.RESERVE_BYTES


@pytest.mark.parametrize(
    ("agents", "floor", "env", "starts"),
    [
        (["a"], (0, 18), {}, "note: "),
        (["a"], (0, 18), {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "warning: "),
        (["a"], (0, 18), {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, "warning: "),
        (["a"], (0, 20), {}, "hint: "),
        ([], (0, 18), {}, "hint: "),
        ([], (0, 18), {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, None),
    ],
)  # fmt: skip
def test_expandable_segments_are_advised_only_without_vllm_or_with_its_fix(
    agents, floor, env, starts
):
    advice = allocator_advice(agents, floor, env)
    if starts is None:
        assert advice is None
        return
    assert advice.startswith(starts)
    if starts != "hint: ":
        assert "pidfd_getfd" in advice and "sleep mode" in advice and "a)" in advice


def test_the_vllm_floor_in_the_code_is_the_vllm_extras():
    """`graft plan`'s allocator advice reads `VLLM_FLOOR`, not the installed metadata (an old
    editable install says vllm>=0.18): it must be pyproject.toml's `vllm` extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    (requirement,) = extras["vllm"]
    assert requirement.replace(" ", "") == "vllm>=" + ".".join(map(str, VLLM_FLOOR))
    assert allocator_advice(["a"], VLLM_FLOOR, {}).startswith("hint: ")  # 0.32 has the fix
