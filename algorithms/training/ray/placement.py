"""Where a worker-group run's ranks go: placement groups per agent, and the placement map.

Each agent of a worker-group run (`ray.ranks_per_agent: k`) gets a placement group of its
own: k bundles, one per rank (`rank_bundle`), laid out by `ray.placement_strategy` (PACK:
on one node where they fit, spilling to others where not). Rank r runs in bundle r. All
agents' groups are requested at once and awaited together (gang scheduling), unless
`ray.one_agent_per_node` is set: then agent i's group is requested once agents 0..i-1 are
placed, with a label selector that excludes their nodes (`ray.io/node-id`), so no node
hosts ranks of two agents. Ray's strategies (PACK, SPREAD, STRICT_*) act on the bundles of
one placement group, and each agent is a group of its own so that its ranks can PACK, so
no Ray strategy says "agents apart": the option is named by the layout it guarantees.

`placement_map` reads back where each rank landed: agent, rank, bundle, node, the GPU ids
Ray assigned and the rank's `CUDA_VISIBLE_DEVICES`. `python -m
algorithms.training.ray.placement CONFIG [--address ADDR]` reserves a config's layout on
a cluster with bare actors (`Placed`, no model loaded), prints the map and releases it:
a check of the layout before a run. It connects as a run does, with the layout's needs
(`group_needs`): a local cluster too small for them in all fails at once, naming the
shortfall; a cluster that cannot place the layout fails after `ray.placement_timeout_s`.

The worker-group keys are read from the raw `ray:` mapping here (`split_group_options`)
until `ray.options`' typed schema declares them.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.placement_group import (
    PlacementGroup,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from algorithms.storage.yaml_schema import ConfigError
from algorithms.training.ray.connection import ClusterError, connect
from algorithms.training.ray.options import RayOptions

RANKS_KEY = "ranks_per_agent"
APART_KEY = "one_agent_per_node"
NODE_LABEL = "ray.io/node-id"


@dataclass(frozen=True)
class GroupLayout:
    """The worker-group keys of `ray:`: ranks per agent, and agents on separate nodes."""

    ranks: int
    one_agent_per_node: bool = False


def split_group_options(
    ray_section: Mapping[str, Any],
) -> tuple[GroupLayout | None, dict[str, Any]]:
    """The worker-group layout (None: one `PolicyWorker` per agent) and the rest of the
    `ray:` mapping, for `parse_ray_options`; a bad value is a ConfigError naming its key."""
    rest = dict(ray_section)
    ranks = rest.pop(RANKS_KEY, None)
    apart = rest.pop(APART_KEY, False)
    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1):
        raise ConfigError(f"ray.{RANKS_KEY}: expected null or an integer >= 1, got {ranks!r}")
    if not isinstance(apart, bool):
        raise ConfigError(f"ray.{APART_KEY}: expected true or false, got {apart!r}")
    if apart and ranks is None:
        raise ConfigError(
            f"ray.{APART_KEY}: applies to worker groups (ray.{RANKS_KEY}); with one actor per "
            "agent, ray.placement_strategy: STRICT_SPREAD puts each agent on its own node"
        )
    return (None if ranks is None else GroupLayout(ranks, apart)), rest


def rank_bundle(options: RayOptions, ranks: int) -> dict[str, float]:
    """One rank's resources: the agent's CPUs split evenly, one GPU per rank (or none)."""
    gpus = options.num_gpus_per_agent
    if gpus not in (0, ranks):
        raise ConfigError(
            f"ray.num_gpus_per_agent is {gpus} but ray.{RANKS_KEY} is {ranks}: a worker group "
            "runs one rank per GPU, so they must be equal (or no GPUs)"
        )
    bundle = {"CPU": options.num_cpus_per_agent / ranks}
    if gpus:
        bundle["GPU"] = 1.0
    return bundle


def group_needs(options: RayOptions, layout: GroupLayout, agents: int) -> dict[str, float]:
    """What `agents` worker groups hold in all (resource -> amount), every rank's bundle:
    the needs `connect` checks a private local cluster against before anything waits."""
    bundle = rank_bundle(options, layout.ranks)
    return {key: amount * layout.ranks * agents for key, amount in bundle.items()}


def _request(options: RayOptions, name: str, ranks: int, avoid: Sequence[str]) -> PlacementGroup:
    bundles = [rank_bundle(options, ranks)] * ranks
    selector = [{NODE_LABEL: f"!in({','.join(avoid)})"}] * ranks if avoid else None
    return placement_group(
        bundles,
        strategy=options.placement_strategy,
        name=f"graft-{name}",
        bundle_label_selector=selector,
    )


def _bundle_nodes(group: PlacementGroup) -> list[str]:
    """The node id of each bundle of a ready placement group, in bundle order."""
    nodes = placement_group_table(group)["bundles_to_node_id"]
    return [nodes[index] for index in range(len(nodes))]


def _wait(groups: Sequence[PlacementGroup], timeout: float) -> bool:
    ready, _ = ray.wait([g.ready() for g in groups], num_returns=len(groups), timeout=timeout)
    return len(ready) == len(groups)


def reserve_groups(
    options: RayOptions, layout: GroupLayout, names: Sequence[str]
) -> list[PlacementGroup]:
    """One ready placement group of `layout.ranks` bundles per agent, or ClusterError
    (every group requested so far removed)."""
    groups: list[PlacementGroup] = []
    placed = True
    if layout.one_agent_per_node:
        used: list[str] = []
        for name in names:
            groups.append(_request(options, name, layout.ranks, used))
            placed = _wait(groups[-1:], options.placement_timeout_s)
            if not placed:
                break
            used.extend(sorted(set(_bundle_nodes(groups[-1]))))
    else:
        groups = [_request(options, name, layout.ranks, ()) for name in names]
        placed = _wait(groups, options.placement_timeout_s)
    if not placed:
        for group in groups:
            remove_placement_group(group)
        apart = f", ray.{APART_KEY}=true" if layout.one_agent_per_node else ""
        raise ClusterError(
            f"the Ray cluster could not place {len(names)} agent(s) x {layout.ranks} rank(s) "
            f"with {rank_bundle(options, layout.ranks)} each (ray.placement_strategy="
            f"{options.placement_strategy}{apart}) within ray.placement_timeout_s="
            f"{options.placement_timeout_s} s; the cluster has {ray.cluster_resources()} in "
            f"all and {ray.available_resources()} free on {len(ray.nodes())} node(s)"
        )
    return groups


def start_actors(
    options: RayOptions,
    layout: GroupLayout,
    groups: Sequence[PlacementGroup],
    names: Sequence[str],
    worker: type,
    threads: int,
) -> dict[str, list[Any]]:
    """Each agent's `worker(rank, ranks, threads)` actors, rank r in bundle r of its group."""
    bundle = rank_bundle(options, layout.ranks)
    remote = ray.remote(worker)
    return {
        name: [
            remote.options(
                num_cpus=bundle["CPU"],
                num_gpus=bundle.get("GPU", 0),
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=rank
                ),
                runtime_env=dict(options.runtime_env) or None,
                max_restarts=0,
            ).remote(rank, layout.ranks, threads)
            for rank in range(layout.ranks)
        ]
        for name, group in zip(names, groups, strict=True)
    }


def where_placed(rank: int) -> dict[str, Any]:
    """(inside an actor) Where Ray put this rank: node, GPUs, CUDA_VISIBLE_DEVICES, group."""
    context = ray.get_runtime_context()
    return {
        "rank": rank,
        "node_id": context.get_node_id(),
        "placement_group_id": context.get_placement_group_id(),
        "gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "resources": dict(context.get_assigned_resources()),
    }


class Placed:
    """A bare rank: holds its bundle's resources and reports where it is, loads nothing."""

    def __init__(self, rank: int, world: int, torch_threads: int) -> None:
        self.rank = rank

    def placement(self) -> dict[str, Any]:
        return where_placed(self.rank)


def placement_map(
    actors: Mapping[str, Sequence[Any]], groups: Sequence[PlacementGroup]
) -> list[dict[str, Any]]:
    """One row per rank, agents in order: agent, rank, bundle, node_id, gpu_ids,
    cuda_visible_devices, placement_group_id. Each rank's reported node is checked
    against its bundle's node (ClusterError if Ray put it elsewhere)."""
    rows = []
    for (agent, ranks), group in zip(actors.items(), groups, strict=True):
        nodes = _bundle_nodes(group)
        for bundle, info in enumerate(ray.get([a.placement.remote() for a in ranks])):
            if info["node_id"] != nodes[bundle] or info["placement_group_id"] != group.id.hex():
                raise ClusterError(
                    f"agent {agent!r} rank {info['rank']}: runs on node {info['node_id']} in "
                    f"group {info['placement_group_id']}, but its bundle {bundle} is on node "
                    f"{nodes[bundle]} of group {group.id.hex()}"
                )
            rows.append({"agent": agent, "bundle": bundle, **info})
    return rows


def check_placement(
    options: RayOptions, layout: GroupLayout, names: Sequence[str]
) -> list[dict[str, Any]]:
    """Reserve the layout on the connected cluster with bare `Placed` actors, read its
    placement map and release everything; returns the map."""
    groups = reserve_groups(options, layout, names)
    try:
        actors = start_actors(options, layout, groups, names, Placed, 1)
        try:
            return placement_map(actors, groups)
        finally:
            for ranks in actors.values():
                for actor in ranks:
                    ray.kill(actor)
    finally:
        for group in groups:
            remove_placement_group(group)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    from algorithms.training.ray.options import parse_ray_options
    from algorithms.training.run_config import load_config

    parser = argparse.ArgumentParser(description="Print a worker-group config's placement map.")
    parser.add_argument("config", help="a run config with backend: ray and ray.ranks_per_agent")
    parser.add_argument("--address", default=None, help="join this cluster (ray.address)")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    layout, section = split_group_options(config.ray)
    if layout is None:
        raise SystemExit(f"{args.config}: ray.{RANKS_KEY} is not set: no worker groups to place")
    if args.address is not None:
        section = {k: v for k, v in section.items() if k not in ("num_cpus", "num_gpus")}
        section["address"] = args.address
    options = parse_ray_options(section)
    names = [agent.name for agent in config.agents]
    try:
        connect(options, group_needs(options, layout, len(names)))  # as a run does
        rows = check_placement(options, layout, names)
    except ClusterError as error:
        raise SystemExit(f"{args.config}: {error}") from None
    for row in rows:
        print(json.dumps({k: row[k] for k in row if k != "resources"}))
    return rows


if __name__ == "__main__":
    main()
