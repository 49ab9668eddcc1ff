"""Start one `PolicyWorker` actor per agent on the run's Ray cluster (`connection.connect`).

All agents' resources are requested together as one placement group, one bundle
per agent, so a run either gets everything it needs or fails with the missing
resources named after `ray.placement_timeout_s`; it never starts half its agents and
waits. The bundle layout over nodes follows `ray.placement_strategy`.
"""

from __future__ import annotations

import logging

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import algorithms
from algorithms.training.ray.connection import ClusterError, connect, model_reference
from algorithms.training.ray.options import RayOptions, check_agent_devices, parse_ray_options
from algorithms.training.ray.policy import ActorGroup, RayPolicy
from algorithms.training.ray.worker import PolicyWorker
from algorithms.training.run_config import TrainConfig

log = logging.getLogger(__name__)


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


def make_ray_policies(config: TrainConfig) -> dict[str, RayPolicy]:
    """One actor per agent of `config`, placed and started; returns their proxies.

    Bad `ray:` options and device settings are refused before the cluster is touched.
    The actors load their models in parallel; a load error is an `AgentFailure` naming
    the agent and `start`.
    """
    options = parse_ray_options(config.ray)
    check_agent_devices(config.agents, options)
    algorithm = algorithms.make(config.algorithm, **config.algorithm_options)
    connect(options, {key: amount * len(config.agents) for key, amount in options.bundle().items()})
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
