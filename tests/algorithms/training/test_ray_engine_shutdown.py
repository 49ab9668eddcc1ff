"""No engine process of a worker-group run outlives it: after the run ends and its group is
shut down, or after a rank raises, every engine's processes are gone.

A local CPU Ray cluster with fake GPU resources (as test_ray_backend.py's clusters), one
agent (tiny-b) as a worker group of 2 ranks with `rollout_backend: vllm`. The engine is
`fake_vllm`'s recording `LLM` (put on the actors' path through `ray.runtime_env`): like
vLLM's multiprocess engine, it runs an engine-core process (a child of the owning rank) with
a worker of its own (the rank's grandchild), and writes their pids into a folder the test
reads. On Ray 2.60 `ray.kill` alone (the shutdown before this fix) leaves neither: the raylet
ends a killed actor's descendants (`kill_child_processes_on_worker_exit`), so these tests pass
without `close_engine` too (docs/scale-out.md's table says so); they guard the shutdown that
closes each engine before its actor dies, so the engine frees its GPU share first.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import psutil
import pytest
import ray
from run_configs import small_config

from algorithms.training.loop import Trainer
from algorithms.training.ray import AgentFailure, make_ray_policies
from algorithms.training.run_config import AgentSpec

FAKE_VLLM = Path(__file__).parent / "fake_vllm"
ROOT = Path(__file__).parents[3]


@pytest.fixture(scope="module", autouse=True)
def stop_cluster_afterwards():
    yield
    ray.shutdown()


def _config(run_dir: Path, pids: Path, model: Path):
    ray_options = {
        "num_cpus": 2,
        "num_gpus": 2,  # fake GPU resources in the cluster (the ranks compute on CPU)
        "num_cpus_per_agent": 2,
        "torch_threads": 1,
        "ranks_per_agent": 2,
        "placement_timeout_s": 60,
        "runtime_env": {
            "env_vars": {
                "PYTHONPATH": os.pathsep.join([str(FAKE_VLLM), str(ROOT)]),
                "GRAFT_FAKE_VLLM_PIDS": str(pids),
            }
        },
    }
    options = {"rollout_backend": "vllm", "lr": 1e-3, "generation_batch_size": 8}
    config = small_config(
        run_dir, "grpo", agents=("tiny-b",), agent_options=options, backend="ray", steps=1,
        ray=ray_options, sampling={"max_new_tokens": 8},
    )  # fmt: skip
    agent = config.agents[0]
    return dataclasses.replace(config, agents=(AgentSpec(agent.name, str(model), agent.options),))


def _engine_processes(pids: Path, expected: int = 2) -> list[int]:
    """The engine's processes (its core and the core's worker), once both have started."""
    deadline = time.monotonic() + 60
    while len(list(pids.glob("*.pid"))) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return sorted(int(path.stem) for path in pids.glob("*.pid"))


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone_within(pids: list[int], seconds: float = 30.0) -> list[int]:
    """The pids still alive after `seconds` (killed then, so no test leaves them)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.5)
    alive = [pid for pid in pids if _alive(pid)]
    for pid in alive:
        psutil.Process(pid).kill()
    return alive


def test_a_finished_run_leaves_no_engine_process(tmp_path, tiny_pair_paths):
    pids = tmp_path / "pids"
    pids.mkdir()
    config = _config(tmp_path / "run", pids, tiny_pair_paths["tiny-b"])
    policies = make_ray_policies(config)
    Trainer(config, policies=policies).train()
    started = _engine_processes(pids)
    assert len(started) == 2 and all(map(_alive, started))  # rank 0's engine, until shutdown
    policies["tiny-b"].group.shutdown()  # what the driver's exit runs (atexit)
    assert _gone_within(started) == []


def test_a_rank_that_raises_stops_the_run_and_its_engines(tmp_path, tiny_pair_paths):
    pids = tmp_path / "pids"
    pids.mkdir()
    config = _config(tmp_path / "run", pids, tiny_pair_paths["tiny-b"])
    policy = make_ray_policies(config)["tiny-b"]
    started = _engine_processes(pids)
    assert len(started) == 2 and all(map(_alive, started))
    with pytest.raises(AgentFailure, match=r"agent 'tiny-b' failed in score\(\)"):
        policy.score(["a", "b"], ["x", "y"], ["stop"])  # rank 0 gets one reason for 2 rows
    assert policy.group.closed
    assert _gone_within(started) == []
