"""Data-parallel vLLM engine replicas in a worker group (`vllm_data_parallel_size`): the
layout is validated in one line before any actor starts, each replica spans its own ranks'
GPUs on one node, and the prompts go to the replicas' owner ranks in contiguous chunks."""

from __future__ import annotations

import pytest

from algorithms.training.ray.engine_settings import engine_settings
from algorithms.training.ray.group import GroupPolicy, engine_spec
from algorithms.training.run_config import ConfigError
from graft_env.policies import SamplingParams


def _settings(ranks: int, **options):
    prefixed = {f"vllm_{key}": value for key, value in options.items()}
    return engine_settings(0, {"rollout_backend": "vllm", **prefixed}, 64, ranks)


def test_replicas_split_the_ranks_and_a_layout_that_does_not_fit_is_named():
    assert _settings(4).tensor_parallel_size == 4  # the default: one engine over the group
    two = _settings(4, data_parallel_size=2)
    assert (two.data_parallel_size, two.tensor_parallel_size) == (2, 2)
    assert _settings(4, data_parallel_size=4).tensor_parallel_size == 1
    assert _settings(4, data_parallel_size=2, tensor_parallel_size=1).tensor_parallel_size == 1
    with pytest.raises(
        ConfigError, match=r"^agents\.0\.options\.vllm_data_parallel_size: 3 replicas do not divide"
    ):
        _settings(4, data_parallel_size=3)
    with pytest.raises(
        ConfigError,
        match=r"^agents\.0\.options\.vllm_data_parallel_size: 2 replicas x tp 2 is more than "
        r"the group's 2 rank",
    ):
        _settings(2, data_parallel_size=2, tensor_parallel_size=2)
    with pytest.raises(ValueError, match=r"^agents\.0\.options\.vllm_data_parallel_size: 0 must"):
        _settings(2, data_parallel_size=0)


def _placements(nodes: list[str]) -> list[dict]:
    return [{"node_id": node, "gpu_ids": [str(r)]} for r, node in enumerate(nodes)]


def test_each_replica_sees_its_own_ranks_gpus_and_spans_one_node():
    options = {"rollout_backend": "vllm", "vllm_data_parallel_size": 2}
    spec = engine_spec(_settings(4, data_parallel_size=2), options, _placements(["a"] * 4))
    assert spec["replicas"] == [
        {"ranks": [0, 1], "visible_devices": "0,1"},
        {"ranks": [2, 3], "visible_devices": "2,3"},
    ]
    assert spec["tensor_parallel_size"] == 2 and spec["visible_devices"] == "0,1"
    apart = engine_spec(_settings(4, data_parallel_size=2), options, _placements(list("aabb")))
    assert [r["ranks"] for r in apart["replicas"]] == [[0, 1], [2, 3]]  # each on one node
    with pytest.raises(ValueError, match=r"engine replica 0's 2 tensor-parallel workers"):
        engine_spec(_settings(4, data_parallel_size=2), options, _placements(list("abab")))


def test_prompts_go_to_the_owner_ranks_in_chunks_and_come_back_in_order():
    policy = GroupPolicy.__new__(GroupPolicy)  # the routing only, no actors
    policy.ranks, policy.engine_owners = [None] * 4, [0, 2]
    sent = {}

    def submit(method, per_rank, merge):
        sent.update(method=method, per_rank=per_rank)
        answers = [[f"r{r}:{p}" for p in args[0]] for r, args in enumerate(per_rank)]
        return merge(answers)

    policy._submit = submit
    sampling = SamplingParams(seed=4)
    merged = policy.generate_async(["p0", "p1", "p2"], 2, sampling)
    assert sent["method"] == "generate_engine"
    assert [args[0] for args in sent["per_rank"]] == [["p0", "p1"], [], ["p2"], []]
    assert merged == ["r0:p0", "r0:p1", "r2:p2"]
