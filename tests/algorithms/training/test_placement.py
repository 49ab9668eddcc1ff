"""Worker-group placement on local Ray clusters with fake GPUs, no model loaded.

The paper configs' layouts are reserved with bare actors (`placement.Placed`) through the
same placement code a run uses, and their placement map is checked: which agent, rank,
bundle, node, GPU id and CUDA_VISIBLE_DEVICES. One 4-GPU node (`ray.init(num_gpus=4)`)
for paper_smollm3_qwen3.yaml, two nodes of 2 GPUs (`ray.cluster_utils.Cluster`) for
paper_smollm3_qwen3_2node.yaml. The CLI (`placement.main`) on a local cluster too small for
paper_smollm3_qwen3.yaml fails at once, as a run does.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from algorithms.storage.yaml_schema import ConfigError
from algorithms.training.ray.options import check_agent_devices, parse_ray_options
from algorithms.training.ray.placement import (
    ClusterError,
    GroupLayout,
    check_placement,
    main,
    rank_bundle,
    split_group_options,
)
from algorithms.training.run_config import load_config

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
ONE_NODE, TWO_NODES = "paper_smollm3_qwen3.yaml", "paper_smollm3_qwen3_2node.yaml"
AGENTS = ["smollm3-3b", "qwen3-1.7b"]


def paper_layout(name: str):
    config = load_config(CONFIGS / name)
    layout, section = split_group_options(config.ray)
    options = parse_ray_options(section)
    check_agent_devices(config.agents, options)
    return config, layout, options


@pytest.mark.parametrize(("name", "apart"), [(ONE_NODE, False), (TWO_NODES, True)])
def test_the_paper_configs_are_two_ranks_of_one_gpu_per_agent(name, apart):
    config, layout, options = paper_layout(name)
    assert [agent.name for agent in config.agents] == AGENTS
    assert layout == GroupLayout(ranks=2, one_agent_per_node=apart)
    assert rank_bundle(options, layout.ranks) == {"CPU": 4.0, "GPU": 1.0}
    assert options.placement_strategy == "PACK"
    assert options.address == ("auto" if apart else None)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"ranks_per_agent": "2"}, r"^ray\.ranks_per_agent: expected null or an integer >= 1"),
        ({"ranks_per_agent": 0}, r"^ray\.ranks_per_agent: expected null or an integer >= 1"),
        (
            {"ranks_per_agent": 2, "one_agent_per_node": "yes"},
            r"^ray\.one_agent_per_node: expected true or false, got 'yes'$",
        ),
        ({"one_agent_per_node": True}, r"^ray\.one_agent_per_node: applies to worker groups"),
    ],
)
def test_bad_group_keys_are_named(section, message):
    with pytest.raises(ConfigError, match=message):
        split_group_options(section)


def by_agent(rows):
    return {agent: [r for r in rows if r["agent"] == agent] for agent in AGENTS}


def assert_ranks_in_their_bundles_one_gpu_each(rows):
    assert [(r["agent"], r["rank"], r["bundle"]) for r in rows] == [
        (agent, rank, rank) for agent in AGENTS for rank in (0, 1)
    ]
    for ranks in by_agent(rows).values():
        assert len({r["placement_group_id"] for r in ranks}) == 1
        assert len({r["node_id"] for r in ranks}) == 1, "an agent's ranks PACK on one node"
    assert len({r["placement_group_id"] for r in rows}) == 2, "a placement group per agent"
    for row in rows:
        assert len(row["gpu_ids"]) == 1 and row["cuda_visible_devices"] == row["gpu_ids"][0]
        assert row["resources"]["GPU"] == 1.0 and row["resources"]["CPU"] == 4.0


@pytest.fixture
def one_node_4_gpus():
    ray.init(address="local", num_cpus=16, num_gpus=4, include_dashboard=False)
    yield
    ray.shutdown()


def test_one_4_gpu_node_holds_both_agents_on_its_4_gpus(one_node_4_gpus):
    _, layout, options = paper_layout(ONE_NODE)
    rows = check_placement(options, layout, AGENTS)
    assert_ranks_in_their_bundles_one_gpu_each(rows)
    assert len({r["node_id"] for r in rows}) == 1
    assert sorted(r["gpu_ids"][0] for r in rows) == ["0", "1", "2", "3"]
    # agents apart cannot hold on one node: refused, naming the option, all released
    apart = dataclasses.replace(options, placement_timeout_s=3.0)
    with pytest.raises(ClusterError, match=r"one_agent_per_node=true\) within"):
        check_placement(apart, GroupLayout(2, one_agent_per_node=True), AGENTS)
    released = time.monotonic() + 30  # removal is asynchronous
    while ray.available_resources().get("GPU") != 4.0 and time.monotonic() < released:
        time.sleep(0.2)
    assert ray.available_resources().get("GPU") == 4.0


@pytest.fixture
def two_nodes_2_gpus():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 8, "num_gpus": 2})
    cluster.add_node(num_cpus=8, num_gpus=2)
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()
    yield
    ray.shutdown()
    cluster.shutdown()


def test_two_nodes_of_2_gpus_hold_one_agent_each(two_nodes_2_gpus):
    _, layout, options = paper_layout(TWO_NODES)
    rows = check_placement(options, layout, AGENTS)
    assert_ranks_in_their_bundles_one_gpu_each(rows)
    nodes = {agent: {r["node_id"] for r in ranks} for agent, ranks in by_agent(rows).items()}
    assert len(set.union(*nodes.values())) == 2, "one node per agent"
    for ranks in by_agent(rows).values():
        assert sorted(r["gpu_ids"][0] for r in ranks) == ["0", "1"]


def test_the_cli_on_a_local_cluster_too_small_fails_at_once_naming_the_shortfall(tmp_path):
    """`python -m algorithms.training.ray.placement` checks the local cluster it starts
    against the layout's needs, as a run does, instead of waiting placement_timeout_s."""
    ray.shutdown()  # the CLI starts its own cluster
    text = (CONFIGS / ONE_NODE).read_text()
    timeout = "  placement_timeout_s: 600\n"
    assert text.count(timeout) == 1
    small = tmp_path / ONE_NODE  # 2 fake GPUs for 2 agents x 2 ranks of one GPU each
    # No wall-clock bound (starting the local cluster alone takes 12-14 s on a loaded
    # machine): the message is `connect`'s capacity check, which runs before any wait; a
    # CLI that waited would fail with the placement timeout's message instead, after 60 s
    # rather than the shipped 600
    small.write_text(
        text.replace(timeout, "  placement_timeout_s: 60\n  num_cpus: 16\n  num_gpus: 2\n")
    )
    try:
        with pytest.raises(SystemExit, match=r"needs 4 GPU \(the cluster has 2\) on the local"):
            main([str(small)])
        assert not ray.is_initialized()
    finally:
        ray.shutdown()
