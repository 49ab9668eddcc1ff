"""Connect to (or start) a Ray cluster and start one `PolicyWorker` actor per agent.

All agents' resources are requested together as one placement group, one bundle
per agent, so a run either gets everything it needs or fails with the missing
resources named after `ray.placement_timeout_s`; it never starts half its agents and
waits. The bundle layout over nodes follows `ray.placement_strategy`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import algorithms
from algorithms.training.ray.options import RayOptions, check_agent_devices, parse_ray_options
from algorithms.training.ray.policy import ActorGroup, RayPolicy
from algorithms.training.ray.worker import PolicyWorker
from algorithms.training.run_config import ConfigError, TrainConfig
from graft_env.policies import TINY_NAMES

log = logging.getLogger(__name__)


RANKS_KEY = "ranks_per_agent"


def split_ranks_option(ray_section: Mapping[str, Any]) -> tuple[int | None, dict[str, Any]]:
    """`ray.ranks_per_agent` (None: one `PolicyWorker` per agent, as before) and the rest
    of the `ray:` mapping, for `parse_ray_options`."""
    rest = dict(ray_section)
    ranks = rest.pop(RANKS_KEY, None)
    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1):
        raise ConfigError(f"ray.{RANKS_KEY}: expected null or an integer >= 1, got {ranks!r}")
    return ranks, rest


class ClusterError(RuntimeError):
    """The Ray cluster cannot host the run as configured; the message says what is missing."""


def connect(options: RayOptions) -> None:
    """Join the configured cluster, or start a private local one (`ray.address: null`)."""
    if ray.is_initialized():
        resources = ray.cluster_resources()
        for key, resource in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
            wanted = getattr(options, key)
            if wanted is not None and resources.get(resource, 0) != wanted:
                log.warning(
                    "this process is already connected to a Ray cluster with %s %s; "
                    "ray.%s=%s is not applied",
                    resources.get(resource, 0),
                    resource,
                    key,
                    wanted,
                )
        log.info("using this process's existing Ray connection")
        return
    if options.address is None:
        ray.init(
            address="local",
            num_cpus=options.num_cpus,
            num_gpus=options.num_gpus,
            include_dashboard=options.include_dashboard,
        )
    else:
        ray.init(address=options.address)


def reserve(options: RayOptions, agents: int) -> PlacementGroup:
    """A ready placement group with one bundle per agent, or ClusterError."""
    bundle = options.bundle()
    group = placement_group([bundle] * agents, strategy=options.placement_strategy)
    ready, _ = ray.wait([group.ready()], timeout=options.placement_timeout_s)
    if not ready:
        remove_placement_group(group)
        raise ClusterError(
            f"the Ray cluster could not place {agents} agent(s) with {bundle} each "
            f"(ray.placement_strategy={options.placement_strategy}) within "
            f"ray.placement_timeout_s={options.placement_timeout_s} s; the cluster has "
            f"{ray.cluster_resources()} in all and {ray.available_resources()} free"
        )
    return group


def model_reference(model: str) -> str:
    """A model path that exists here is made absolute: actors may run in another cwd.

    Tiny-pair names stay names, as `load_policy` reads them before any path.
    """
    path = Path(model)
    return str(path.absolute()) if model not in TINY_NAMES and path.exists() else model


def make_ray_policies(config: TrainConfig) -> dict[str, RayPolicy]:
    """One actor per agent of `config`, placed and started; returns their proxies.

    With `ray.ranks_per_agent: k`, each agent is a worker group of k ranks instead
    (`group.make_group_policies`, `GroupPolicy` proxies).

    Bad `ray:` options and device settings are refused before the cluster is touched.
    The actors load their models in parallel; a load error is an `AgentFailure` naming
    the agent and `start`.
    """
    ranks, ray_section = split_ranks_option(config.ray)
    options = parse_ray_options(ray_section)
    check_agent_devices(config.agents, options)
    if ranks is not None:
        from algorithms.training.ray.group import make_group_policies  # it imports this module

        return make_group_policies(config, options, ranks)
    algorithm = algorithms.make(config.algorithm, **config.algorithm_options)
    connect(options)
    pg = reserve(options, len(config.agents))
    worker = ray.remote(PolicyWorker)
    actors = {
        agent.name: worker.options(
            num_cpus=options.num_cpus_per_agent,
            num_gpus=options.num_gpus_per_agent,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=index
            ),
            runtime_env=dict(options.runtime_env) or None,
            max_restarts=0,
        ).remote(
            model_reference(agent.model),
            dict(agent.options),
            config.algorithm,
            dict(config.algorithm_options),
            options.threads,
        )
        for index, agent in enumerate(config.agents)
    }
    group = ActorGroup(actors, [pg], options.call_timeout_s)
    pending = {name: actor.describe.remote() for name, actor in actors.items()}
    # Loading a large model can take minutes: start waits while the actor lives.
    infos = {name: group.get(name, "start", ref, None) for name, ref in pending.items()}
    for name, info in infos.items():
        log.info(
            "agent %s: actor on node %s, GPUs %s, device %s, %d torch threads",
            name,
            info["node_id"],
            info["gpu_ids"],
            info["device"],
            info["torch_threads"],
        )
    return {name: RayPolicy(name, actors[name], group, infos[name], algorithm) for name in actors}
