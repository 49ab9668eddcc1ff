"""The Ray backend on a local CPU-only cluster: same run as the local backend, clear
failures, resume after a killed actor, and the `ray:` options schema.

Every actor set costs ~10 s of start-up on two cores (a fresh process importing torch
and transformers), so the end-to-end scenario runs once per module (`scenario`):
a local reference run; a Ray run whose actor is killed after step 0; the resumed
run to the end; then probes of the live resumed actors. Tests assert on what it saw.
"""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import ray
from run_configs import small_config

import algorithms
from algorithms.training.loop import Trainer
from algorithms.training.ray import (
    AgentFailure,
    ClusterError,
    RayPolicy,
    TrafficMeter,
    make_ray_policies,
    parse_ray_options,
)
from algorithms.training.ray.options import check_agent_devices
from algorithms.training.run_config import AgentSpec, ConfigError, load_config
from graft_env.policies import Policy, SamplingParams

REPO = Path(__file__).resolve().parents[3]
CLUSTER = {"num_cpus": 2, "placement_timeout_s": 60}


def comparable(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def pair_config(run_dir: Path, paths, **extra):
    """The conftest's small graft run on the prebuilt tiny pair, with explicit model paths."""
    config = small_config(run_dir, "graft", **extra)
    agents = tuple(
        AgentSpec(a.name, str(paths[a.name]), {"lr": 1e-3, "generation_batch_size": 32})
        for a in config.agents
    )
    return dataclasses.replace(config, agents=agents)


@pytest.fixture(scope="module", autouse=True)
def stop_cluster_afterwards():
    yield
    ray.shutdown()


@dataclasses.dataclass
class Probes:
    """What the live resumed actors answered (see `probe`)."""

    policies: dict
    submitted_ready: int = -1
    async_texts: dict = dataclasses.field(default_factory=dict)
    blocking_texts: dict = dataclasses.field(default_factory=dict)
    traffic: TrafficMeter | None = None
    traffic_expected: dict = dataclasses.field(default_factory=dict)
    ended_and_cut: list = dataclasses.field(default_factory=list)
    raised: AgentFailure | None = None
    after_shutdown: AgentFailure | None = None
    actor_gone: bool = False


@dataclasses.dataclass
class Scenario:
    local_rows: list
    local_weights: dict
    failure: AgentFailure
    eos_ids: dict
    ray_rows: list
    ray_weights: dict
    probes: Probes


def texts(groups):
    return [[g.text for g in group] for group in groups]


def probe(policies) -> Probes:
    """Non-blocking generation, the traffic meter, then (last: it stops the actors) an
    exception raised inside an actor."""
    probes = Probes(policies=dict(policies))
    sampling = SamplingParams(max_new_tokens=48, seed=7)
    prompts = {
        name: [p.format_prompt(f"Compute {i} + 4.") for i in range(3)]
        for name, p in policies.items()
    }
    pending = {name: p.generate_async(prompts[name], 2, sampling) for name, p in policies.items()}
    ready, _ = ray.wait([call.ref for call in pending.values()], num_returns=2, timeout=0)
    probes.submitted_ready = len(ready)
    probes.async_texts = {name: texts(call.result()) for name, call in pending.items()}
    probes.blocking_texts = {
        name: texts(p.generate(prompts[name], 2, sampling)) for name, p in policies.items()
    }
    policy = policies["tiny-a"]
    policy.traffic = probes.traffic = TrafficMeter()
    prompt = policy.format_prompt("Compute 2 + 2.")
    policy.traffic = None
    probes.traffic_expected = {
        ("format_prompt", "sent"): len(pickle.dumps(("Compute 2 + 2.",), protocol=5)),
        ("format_prompt", "received"): len(pickle.dumps(prompt, protocol=5)),
    }
    probes.ended_and_cut = policy.score([prompt] * 2, ["2 + 2 = 4"] * 2, ["stop", "length"])
    with pytest.raises(AgentFailure) as raised:
        policy.score(["Compute 1 + 1."], [42], ["stop"])
    probes.raised = raised.value
    with pytest.raises(AgentFailure) as after:
        policies["tiny-b"].format_prompt("Compute 1 + 1.")
    probes.after_shutdown = after.value
    try:
        ray.get(policies["tiny-b"].actor.describe.remote())
    except ray.exceptions.RayActorError:
        probes.actor_gone = True
    return probes


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, tiny_pair_paths) -> Scenario:
    """Local reference run; Ray run killed after step 0; resumed Ray run; probes."""
    root = tmp_path_factory.mktemp("ray")
    local = Trainer(pair_config(root / "local", tiny_pair_paths))
    local_rows = local.train()
    local_weights = {
        name: {k: v.numpy().copy() for k, v in p.model.state_dict().items()}
        for name, p in local.policies.items()
    }
    config = pair_config(root / "ray", tiny_pair_paths, backend="ray", ray=CLUSTER)
    first = Trainer(config)

    def kill_tiny_b(record):
        ray.kill(first.policies["tiny-b"].actor)

    with pytest.raises(AgentFailure) as failure:
        first.train(on_step=kill_tiny_b)
    resumed = Trainer(config)
    ray_rows = resumed.train()
    ray_weights = {name: p.state_dict() for name, p in resumed.policies.items()}
    eos_ids = {name: p.eos_id for name, p in local.policies.items()}
    return Scenario(
        local_rows,
        local_weights,
        failure.value,
        eos_ids,
        ray_rows,
        ray_weights,
        probe(resumed.policies),
    )


def test_a_killed_actor_stops_the_run_naming_the_agent_and_the_method(scenario):
    failure = scenario.failure
    assert (failure.agent, failure.method) == ("tiny-b", "generate")
    assert "agent 'tiny-b' failed in generate()" in str(failure)
    assert "died" in str(failure) and "resume" in str(failure)


def test_the_resumed_ray_run_equals_the_local_run(scenario):
    assert [(r["step"], r["agent"]) for r in scenario.ray_rows] == [
        (0, "tiny-a"),
        (0, "tiny-b"),
        (1, "tiny-a"),
        (1, "tiny-b"),
    ]
    assert comparable(scenario.ray_rows) == comparable(scenario.local_rows)
    for agent, local in scenario.local_weights.items():
        remote = scenario.ray_weights[agent]
        assert sorted(remote) == sorted(local)
        for key, value in local.items():
            np.testing.assert_array_equal(remote[key], value, err_msg=f"{agent}.{key}")


def test_ray_policies_follow_the_policy_protocol(scenario):
    for agent, policy in scenario.probes.policies.items():
        assert isinstance(policy, RayPolicy) and isinstance(policy, Policy)
        assert policy.name == agent and policy.temperature == 1.0
        assert policy.placement["torch_threads"] == 1


def test_generate_async_returns_at_once_and_matches_generate(scenario):
    probes = scenario.probes
    assert probes.submitted_ready == 0, "generate_async waited for an actor"
    assert probes.async_texts == probes.blocking_texts
    assert [len(group) for group in probes.async_texts["tiny-a"]] == [2, 2, 2]


def test_the_traffic_meter_counts_pickled_arguments_and_results(scenario):
    assert scenario.probes.traffic.calls == {"format_prompt": 1}
    assert dict(scenario.probes.traffic.bytes) == scenario.probes.traffic_expected


def test_scoring_in_an_actor_appends_eos_only_after_a_finished_response(scenario):
    ended, cut = scenario.probes.ended_and_cut
    assert ended.token_ids == [*cut.token_ids, scenario.eos_ids["tiny-a"]]
    assert scenario.eos_ids["tiny-a"] not in cut.token_ids
    assert len(cut.logprobs) == len(cut.token_ids)


def test_an_exception_inside_an_actor_stops_the_whole_group(scenario):
    probes = scenario.probes
    assert (probes.raised.agent, probes.raised.method) == ("tiny-a", "score")
    assert "it raised TypeError" in str(probes.raised)
    assert probes.after_shutdown.agent == "tiny-b"
    assert "already shut down" in str(probes.after_shutdown)
    assert probes.actor_gone


def test_update_refuses_any_loss_but_the_run_algorithms(scenario):
    """Checked on the driver before anything is sent, so it holds for stopped actors too."""
    policy = scenario.probes.policies["tiny-a"]
    with pytest.raises(ValueError, match="not that loss"):
        policy.update(None, lambda new_logp, sequences: (new_logp.sum(), {}))
    other = algorithms.make("graft", delta=0.9)
    with pytest.raises(ValueError, match=r"agent 'tiny-a'.*'graft'"):
        policy.update_async(None, other.loss)


def all_cpus_free_within(seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU") == ray.cluster_resources()["CPU"]:
            return True
        time.sleep(0.2)
    return False


def test_a_model_that_cannot_load_fails_the_start_and_frees_its_resources(tmp_path):
    config = small_config(tmp_path / "run", "grpo", agents=("tiny-b",), backend="ray", ray=CLUSTER)
    missing = AgentSpec("tiny-b", str(tmp_path / "missing-model"), {})
    with pytest.raises(AgentFailure, match=r"(?s)'tiny-b' failed in start\(\).*FileNotFoundError"):
        make_ray_policies(dataclasses.replace(config, agents=(missing,)))
    assert all_cpus_free_within(10), "the failed run still holds its placement group"


def test_a_cluster_too_small_fails_fast_naming_what_is_missing(tmp_path, tiny_pair_paths):
    config = pair_config(
        tmp_path / "run",
        tiny_pair_paths,
        backend="ray",
        ray={**CLUSTER, "num_cpus_per_agent": 64, "placement_timeout_s": 1},
    )
    with pytest.raises(ClusterError, match=r"could not place 2 agent\(s\) with \{'CPU': 64\}"):
        make_ray_policies(config)


def test_a_local_cluster_too_small_fails_at_once_not_after_the_timeout(tmp_path, tiny_pair_paths):
    """The private cluster a run starts cannot grow: waiting placement_timeout_s for it is
    pointless (the paper configs wait 600 s)."""
    ray.shutdown()  # this run starts its own cluster, as `graft train` does
    config = pair_config(
        tmp_path / "run",
        tiny_pair_paths,
        backend="ray",
        ray={"num_cpus": 2, "num_cpus_per_agent": 64, "placement_timeout_s": 600},
    )
    # the message is the up-front check's (waiting out the 600 s would end in another one), so
    # no clock is read
    with pytest.raises(ClusterError, match=r"needs 128 CPU \(the cluster has 2\) on the local"):
        make_ray_policies(config)
    assert not ray.is_initialized()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"adress": "auto"}, r"^ray\.adress: unknown option; valid: address, num_cpus, "),
        ({"num_cpus_per_agent": 0}, r"^ray\.num_cpus_per_agent: 0 must be > 0$"),
        ({"num_gpus_per_agent": 1.5}, r"^ray\.num_gpus_per_agent: 1.5 must be a whole number"),
        ({"num_gpus_per_agent": "2"}, r"^ray\.num_gpus_per_agent: '2' is not a number$"),
        ({"torch_threads": 1.5}, r"^ray\.torch_threads: 1.5 is not an integer$"),
        ({"call_timeout_s": 0}, r"^ray\.call_timeout_s: 0 must be > 0$"),
        ({"placement_strategy": "pack"}, r"^ray\.placement_strategy: 'pack' is not one of 'PACK'"),
        ({"address": "auto", "num_cpus": 4}, r"ray.num_cpus: only applies to the local cluster"),
        ({"address": ""}, r"^ray\.address: '' must be null or a non-empty string$"),
        ({"runtime_env": ["x"]}, r"^ray\.runtime_env: expected a mapping"),
        ({"include_dashboard": "yes"}, r"^ray\.include_dashboard: 'yes' is not true or false$"),
    ],
)
def test_bad_ray_options_are_named(options, message):
    with pytest.raises(ConfigError, match=message):
        parse_ray_options(options)


def test_option_defaults_and_derived_values():
    defaults = parse_ray_options({})
    assert defaults.address is None and defaults.bundle() == {"CPU": 1.0}
    assert defaults.threads == 1
    gpu = parse_ray_options({"num_cpus_per_agent": 6.5, "num_gpus_per_agent": 2})
    assert gpu.bundle() == {"CPU": 6.5, "GPU": 2} and gpu.threads == 6
    assert parse_ray_options({"torch_threads": 3, "num_cpus_per_agent": 8}).threads == 3


def test_devices_must_agree_with_reserved_gpus():
    cpu_agent = [AgentSpec("a", "tiny-a", {})]
    gpu_agent = [AgentSpec("a", "tiny-a", {"device": "cuda"})]
    with pytest.raises(ConfigError, match=r"agents.0.options.device is 'cpu'"):
        check_agent_devices(cpu_agent, parse_ray_options({"num_gpus_per_agent": 1}))
    with pytest.raises(ConfigError, match=r"agents.0.options.device is 'cuda'.* is 0"):
        check_agent_devices(gpu_agent, parse_ray_options({}))
    check_agent_devices(gpu_agent, parse_ray_options({"num_gpus_per_agent": 0.5}))


def test_shipped_ray_configs_are_valid_for_the_ray_backend():
    paths = sorted((REPO / "configs").glob("paper_*_ray*.yaml"))
    assert paths, "no Ray configs shipped"
    for path in paths:
        config = load_config(path)
        assert config.backend == "ray", path
        options = parse_ray_options(config.ray)
        check_agent_devices(config.agents, options)


def test_algorithms_ray_is_the_one_front_and_its_schema_needs_no_ray():
    code = (
        "import sys\nimport algorithms.training.ray as front\n"
        "assert front.parse_ray_options({}).torch_threads is None\n"
        "assert 'ray' not in sys.modules, 'the ray: schema imported ray'\n"
        "missing = [name for name in front.__all__ if getattr(front, name, None) is None]\n"
        "assert not missing, missing\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
