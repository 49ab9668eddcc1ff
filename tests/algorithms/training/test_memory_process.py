"""One GPU of a one-process vLLM agent (`memory_plan.process`, `VLLMPolicy`) through the engine
lifecycle, on pure inputs (the paper models' published shapes, no weights), and the verdicts
`graft plan` / `graft train` give the single-process paper config with a vLLM agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from algorithms.training import memory_check
from algorithms.training import memory_plan as mp
from algorithms.training.memory_plan import lifecycle, process, reserves
from algorithms.training.run_config import load_config

GIB = mp.GIB
REPO = Path(__file__).resolve().parents[3]
LOCAL = REPO / "configs" / "paper_smollm3_qwen3_local.yaml"
VLLM = ["agents.0.options.rollout_backend=vllm"]
SMOLLM3 = mp.paper_architecture("HuggingFaceTB/SmolLM3-3B-Base")


def gpu(gib: float, overrides: list[str] = VLLM) -> tuple[mp.DevicePlan, lifecycle.GpuPlan]:
    config = load_config(LOCAL, overrides)
    work = mp.run_workload(config, 1024)
    (device, *_) = mp.plan_run(config, work, gib * GIB, 4)
    return device, memory_check.process_agent_plan(config, work, device, 0)


def row(plan: lifecycle.GpuPlan, name: str) -> dict[str, float]:
    (found,) = [r for r in plan.rows if r.name == name]
    return dict(found.cells)


def test_the_whole_model_staging_buffer_is_held_in_every_phase_after_load():
    _, plan = gpu(141)
    staging = row(plan, process.STAGER_ROW)
    assert set(staging) == set(lifecycle.LIFECYCLE[1:])
    assert all(v == pytest.approx(SMOLLM3.params * 2) for v in staging.values())  # bf16, tied once


def test_the_engine_share_is_held_where_it_is_awake_and_at_its_start():
    _, plan = gpu(141)
    assert plan.phases == lifecycle.LIFECYCLE
    assert set(row(plan, "vLLM KV cache")) == {"load", "generate", lifecycle.WAKE_KV}
    assert not {"score", "update"} & set(row(plan, "vLLM weights / TP"))
    assert set(row(plan, "CUDA context, vLLM worker")) == set(lifecycle.LIFECYCLE)
    assert not [r for r in plan.rows if r.name.startswith("NCCL")]  # TP 1, no FSDP2 group
    # the trainer's own terms are one process's, autocast copies included, none in generate
    assert set(row(plan, "autocast bf16 weight copies")) == {"score", "update"}


def test_the_update_holds_the_trainer_peak_the_stager_and_the_engine_context():
    device, plan = gpu(141)
    (_, _, policy) = device.agents[0]
    unsharded = policy.persistent_bytes + policy.transient("update")
    extra = SMOLLM3.params * 2 + reserves.CUDA_CONTEXT_BYTES
    assert plan.total("update") == pytest.approx(unsharded + extra)


@pytest.mark.parametrize(("gib", "fits"), [(141, True), (80, False), (70, False)])
def test_the_single_process_paper_config_with_a_vllm_agent(gib, fits):
    """At 80 GiB the unsharded plan says 75.6 of 78 GiB fits; beside its engine's context and
    the staging buffer the update needs 81.8 (its sdpa mask, copies and CUDA alignment copy
    included)."""
    config = load_config(LOCAL, VLLM)
    work = mp.run_workload(config, 1024)
    plans = mp.plan_run(config, work, gib * GIB, 4)
    if fits:
        memory_check.check_plans(config, work, plans)
        return
    with pytest.raises(ValueError, match=r"smollm3-3b needs 81\.8 GiB on cuda:0 beside its vLLM"):
        memory_check.check_plans(config, work, plans)


def test_a_device_shared_with_another_policy_holds_its_peak_beside():
    overrides = [*VLLM, "agents.1.options.device=cuda:0"]
    (device, plan), (_, alone) = gpu(400, overrides), gpu(400)
    other = mp.DevicePlan(device.device, device.capacity, device.agents[1:]).peak
    for phase in plan.phases:
        assert plan.total(phase) == pytest.approx(alone.total(phase) + other)
