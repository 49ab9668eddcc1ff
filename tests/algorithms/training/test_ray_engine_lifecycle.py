"""A worker-group rank drives its vLLM engine through the lifecycle of `policies.engine.cycle`:
per step generate → sleep(2) → score and update asleep → wake weights → sync → wake KV cache →
generate, and the engine starts only after the group's barrier (every rank sharded); no rank
releases its staging buffers before the owner's workers have let go of them (a barrier).

The rank is the real `RankWorker` (a 1-rank gloo group in this process, tiny-b, the real
FSDP2 sharding, update and bucketed sync); the engine is `fake_vllm`'s recording `LLM`,
which notes each call with the engine's state (weights awake, KV cache awake).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
from policy_batches import alternating_batch

from algorithms.training.ray import rank as rank_module
from algorithms.training.ray.rank import RankWorker
from graft_env.policies import SamplingParams

FAKE_VLLM = Path(__file__).parent / "fake_vllm"
SPEC = {
    "max_model_len": 256,
    "tensor_parallel_size": 1,
    "enable_sleep_mode": True,  # as on CUDA (the fake engine allows it on CPU)
    "visible_devices": None,
    "sync_bucket_mb": 0.25,
}


@pytest.fixture
def fake_vllm(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE_VLLM))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    import vllm

    vllm.EVENTS.clear()
    yield vllm
    sys.modules.pop("vllm", None)


@pytest.fixture
def worker(fake_vllm, tiny_pair_paths, monkeypatch):
    """Rank 0 of 1 with its engine; `fake_vllm.EVENTS` also notes each barrier and each
    trainer phase (score, the update's forward/backward) with the engine's state."""
    events = fake_vllm.EVENTS
    barrier = dist.barrier

    def noted_barrier() -> None:
        events.append(("barrier", None, None))
        barrier()

    monkeypatch.setattr(dist, "barrier", noted_barrier)

    def engine_state() -> tuple[bool, bool]:
        llm = worker.engine.llm
        return llm.weights, llm.kv

    real_update = rank_module.sharded_update

    def update(*args):
        events.append(("update", *engine_state()))
        return real_update(*args)

    monkeypatch.setattr(rank_module, "sharded_update", update)
    monkeypatch.setattr(RankWorker, "placement", lambda self: {})  # no Ray actor here
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = RankWorker(0, 1, 1)
    options = {"rollout_backend": "vllm", "lr": 1e-3, "generation_batch_size": 8}
    model = str(tiny_pair_paths["tiny-b"])
    worker.setup(f"tcp://127.0.0.1:{port}", model, options, "grpo", {}, SPEC)
    real_score = worker.policy.score

    def score(*args):
        events.append(("score", *engine_state()))
        return real_score(*args)

    monkeypatch.setattr(worker.policy, "score", score)
    yield worker
    dist.destroy_process_group()


def _step(worker: RankWorker, seed: int) -> None:
    """What the loop asks of a rank in one step: rollouts, a peer's scoring, the update."""
    prompts = [worker.format_prompt(p) for p in ("Compute 2 + 3.", "Compute 7 * 8.")]
    groups = worker.generate_engine(prompts, 2, SamplingParams(max_new_tokens=4, seed=seed))
    texts = [gen.text for group in groups for gen in group]
    worker.score([prompts[0]] * len(texts), texts, ["length"] * len(texts))
    worker.update(alternating_batch(worker.policy.name, prompts, groups))


def test_each_step_follows_the_lifecycle_and_only_generate_sees_the_kv_cache(worker, fake_vllm):
    _step(worker, 0)
    _step(worker, 1)
    events = fake_vllm.EVENTS
    calls = [call for call, _, _ in events]
    assert "barrier" in calls and calls.index("barrier") < calls.index("LLM")
    engine = [c for c in calls[calls.index("LLM") + 1 :] if c != "barrier"]
    loads = engine.count("graft_load_weights") // 2
    assert loads >= 2  # tiny-b's blocks in 0.25 MiB buckets: several per sync
    sync = ["wake_up(weights)", *["graft_load_weights"] * loads, "graft_end_sync",
            "reset_prefix_cache"]  # fmt: skip
    step = ["generate", "sleep(2)", "score", "update", *sync]
    assert engine == [*step, "wake_up(kv_cache)", *step]
    for call, weights, kv in events:
        if call == "generate":
            assert weights and kv
        elif call in ("score", "update"):  # the trainer's phases: the engine holds nothing
            assert not weights and not kv
        elif call == "graft_load_weights":
            assert weights and not kv


def test_a_second_rollout_after_a_level_2_sleep_resyncs_first(worker, fake_vllm):
    prompts = [worker.format_prompt("Compute 2 + 3.")]
    sampling = SamplingParams(max_new_tokens=4, seed=0)
    worker.generate_engine(prompts, 2, sampling)
    fake_vllm.EVENTS.clear()
    worker.generate_engine(prompts, 2, sampling)  # no update between: the weights were dropped
    calls = [call for call, _, _ in fake_vllm.EVENTS if call != "barrier"]
    assert calls[0] == "wake_up(weights)" and "graft_load_weights" in calls
    assert calls[-4:] == ["reset_prefix_cache", "wake_up(kv_cache)", "generate", "sleep(2)"]


def test_requests_are_seeded_unless_the_engine_is_seeded_per_step(worker, fake_vllm):
    engine = worker.engine
    prompts = [worker.format_prompt("Compute 2 + 3.")] * 2
    sampling = SamplingParams(max_new_tokens=4, seed=3)
    seen = []
    real = engine.llm.generate
    engine.llm.generate = lambda p, params, use_tqdm: seen.append(params) or real(p, params)
    worker.generate_engine(prompts, 2, sampling)
    seeds = [params.seed for params in seen[-1]]
    assert None not in seeds and len(set(seeds)) == 2  # one per request, distinct
    engine.options = type(engine.options)(seed_scope="step")
    fake_vllm.EVENTS.clear()
    worker.generate_engine(prompts, 2, sampling)
    assert [params.seed for params in seen[-1]] == [None, None]
    calls = [call for call, _, _ in fake_vllm.EVENTS]
    assert calls.count("graft_seed") == 1 and calls.index("graft_seed") < calls.index("generate")


def test_no_rank_releases_its_staging_before_the_engine_lets_go_of_it(worker, fake_vllm):
    """After the last bucket the owner's workers drop their mappings (`graft_end_sync`, in
    `loaded`); a rank that empties its cache before that leaves its buffer in torch's IPC
    limbo until the next sync, so a group barrier comes between them on every rank."""
    events = fake_vllm.EVENTS

    def release(when: str) -> None:
        events.append((f"release({when})", None, None))

    worker.cycle.release = worker.memory.release = release
    _step(worker, 0)
    calls = [call for call, _, _ in events]
    after = calls.index("release(after_sync)")
    assert calls[calls.index("reset_prefix_cache") : after] == ["reset_prefix_cache", "barrier"]
