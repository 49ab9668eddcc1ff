"""vLLM as the rollout engine of a worker group (`rollout_backend: vllm` with
`ray.ranks_per_agent: 2`) on a local CPU Ray cluster: rank 0's engine samples, the two
gloo FSDP2 ranks train and score, and after every update and load the shards reach the
engine bucket by bucket.

Needs vLLM and Ray (the `.ci/vllm` virtualenv, which adds Ray); marked `vllm`:
    python -m pytest -m vllm tests/algorithms/training/test_vllm_group.py -p no:cacheprovider -s
The engine's log-probs are compared with the group's current weights (gathered by rank 0
into a local copy) scoring the sampled token ids. `GRAFT_VLLM_TP` sets the engine's
tensor parallelism (default 1). With 2 the engine's two workers are bound to cores 0 and 1
(`VLLM_CPU_OMP_THREADS_BIND`: vLLM's automatic binding wants a NUMA node per worker) and
the model is tiny-b with an even MLP width (a random copy: its 341 cannot be split in two).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator

import numpy as np
import pytest
from run_configs import small_config

import algorithms
from algorithms.training.run_config import AgentSpec
from graft_env.policies import SamplingParams, load_policy
from graft_env.types import TrainBatch, TrainSequence

pytestmark = pytest.mark.vllm

TOLERANCE = 1e-4  # fp32: vLLM's forward vs the sharded transformers scorer
PROBLEMS = ["Compute 12 + 35.", "Compute 7 * 8.", "Compute 3 + 4."]
TP = int(os.environ.get("GRAFT_VLLM_TP", "1"))


def even_tiny_b(source, directory):
    """tiny-b's tokenizer and shape with intermediate_size 342, random weights (seed 0)."""
    import shutil

    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(source)
    config.intermediate_size = 342
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    for path in source.iterdir():
        if path.name not in ("config.json", "model.safetensors"):
            shutil.copy(path, directory / path.name)
    return directory


@pytest.fixture
def group(tmp_path_factory, tiny_pair_paths) -> Iterator:
    ray = pytest.importorskip("ray")
    from algorithms.training.ray import make_ray_policies

    run_dir = tmp_path_factory.mktemp("run") / "grpo"
    config = small_config(
        run_dir,
        "grpo",
        agents=("tiny-b",),
        backend="ray",
        steps=1,
        ray={
            "num_cpus": 3,
            "num_cpus_per_agent": 2,
            "torch_threads": 1,
            "ranks_per_agent": 2,
            "placement_timeout_s": 120,
            "runtime_env": {"env_vars": {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}} if TP > 1 else {},
        },
    )
    options = {
        "rollout_backend": "vllm",
        "lr": 1e-3,
        "vllm_sync_bucket_mb": 0.25,  # tiny-b's fp32 weights are ~3 MB: several buckets
        "vllm_max_prompt_tokens": 256,
        "vllm_tensor_parallel_size": TP,
    }
    model = tiny_pair_paths["tiny-b"]
    if TP > 1:
        model = even_tiny_b(model, tmp_path_factory.mktemp("tiny-b-even"))
    agent = AgentSpec("tiny-b", str(model), options)
    config = dataclasses.replace(config, agents=(agent,))
    policy = make_ray_policies(config)["tiny-b"]
    policy.loss = algorithms.make(config.algorithm, **config.algorithm_options).loss
    policy.local = load_policy(str(model))  # the test's scorer of the group's weights
    try:
        yield policy
    finally:
        policy.group.shutdown()
        ray.shutdown()


def _flat(prompts, groups):
    return [(p, g) for p, group in zip(prompts, groups, strict=True) for g in group]


def _differences(policy, prompts, groups, label: str) -> np.ndarray:
    """|engine log-prob - trainer log-prob| over every sampled token, the trainer's being
    a local copy of the group's current weights (gathered by rank 0) scoring the sampled
    token ids (random-weight models sample text that does not re-tokenize)."""
    import torch

    local = policy.local
    state = {name: torch.from_numpy(array) for name, array in policy.state_dict().items()}
    local.model.load_state_dict(state)
    pairs = _flat(prompts, groups)
    scored = local.score_tokens([p for p, _ in pairs], [g.token_ids for _, g in pairs])
    diff = np.concatenate([np.abs(g.logprobs - s) for (_, g), s in zip(pairs, scored, strict=True)])
    print(f"\n{label}: {len(pairs)} rows, {diff.size} tokens, max |diff| {diff.max():.2e}")
    return diff


def _batch(policy, prompts, groups) -> TrainBatch:
    sequences = [
        TrainSequence(p, g.token_ids, g.logprobs, advantage=1.0 if i % 2 else -1.0)
        for p, group in enumerate(groups)
        for i, g in enumerate(group)
    ]
    return TrainBatch(policy.name, prompts, sequences, [list(range(len(sequences)))])


def test_the_groups_engine_follows_the_sharded_trainer_through_update_and_load(group, tmp_path):
    prompts = [group.format_prompt(p) for p in PROBLEMS]
    sampling = SamplingParams(max_new_tokens=32, seed=3)
    first = group.generate(prompts, 4, sampling)
    assert [len(g) for g in first] == [4, 4, 4]
    assert _differences(group, prompts, first, f"tp {TP}, initial").max() < TOLERANCE
    group.save(tmp_path / "checkpoint")

    metrics = group.update(_batch(group, prompts, first), group.loss)
    print(f"\nupdate metrics: { {k: v for k, v in metrics.items() if 'sync' in k} }")
    assert metrics["time/weight_sync"] > 0 and metrics["sync/buckets"] > 2
    assert metrics["sync/staging_mib"] < 1.0  # one bucket, not the ~3 MB model
    # the trainer moved: the first samples' log-probs are no longer its own
    assert _differences(group, prompts, first, "first samples, updated trainer").max() > 1e-3
    after = group.generate(prompts, 4, sampling)
    assert _differences(group, prompts, after, f"tp {TP}, after update").max() < TOLERANCE

    group.load(tmp_path / "checkpoint")
    restored = group.generate(prompts, 4, sampling)
    ids = [[g.token_ids for g in grp] for grp in restored]
    assert ids == [[g.token_ids for g in grp] for grp in first]
    assert _differences(group, prompts, restored, f"tp {TP}, after load").max() < TOLERANCE


def test_a_graft_step_of_the_loop_with_an_engine_in_each_agents_group(tmp_path):
    """The paper layout in small: both tiny agents as worker groups of 2 ranks, each with
    its rank-0 engine (TP 1), one GRAFT step of the real Trainer (concurrent rollouts and
    updates, cross-scoring on the ranks); every agent's row reports its sync."""
    ray = pytest.importorskip("ray")
    from algorithms.training.loop import Trainer

    options = {"rollout_backend": "vllm", "lr": 1e-3, "vllm_max_prompt_tokens": 256,
               "vllm_tensor_parallel_size": 1, "vllm_kv_cache_gib": 0.25}  # fmt: skip
    config = small_config(
        tmp_path / "graft", "graft", agent_options=options, backend="ray", steps=1,
        ray={"num_cpus": 5, "num_cpus_per_agent": 2, "torch_threads": 1,
             "ranks_per_agent": 2, "placement_timeout_s": 120},
    )  # fmt: skip
    trainer = Trainer(config)
    try:
        rows = trainer.train()
    finally:
        for policy in trainer.policies.values():
            policy.group.shutdown()
        ray.shutdown()
    assert sorted(row["agent"] for row in rows) == ["tiny-a", "tiny-b"]
    for row in rows:
        print(f"\n{row['agent']}: loss {row['loss']:.4f}, sync {row['time/weight_sync']:.2f} s")
        assert np.isfinite(row["loss"]) and row["time/weight_sync"] > 0
        assert row["sync/buckets"] >= 1
