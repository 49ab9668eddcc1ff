"""Ray backend of the training loop (`backend: ray` in a run config).

Each agent runs in its own Ray actor that owns its model, optimizer and sampler
(an `HFPolicy` built by `load_policy`, as the local backend builds it) and its own
copy of the run's algorithm. The loop talks to `RayPolicy` proxies through the
ordinary Policy protocol; only strings, token ids and float arrays cross between
processes. Ray is an optional extra: the names below need `ray` installed, except
the `ray:` schema (`RayOptions`, `parse_ray_options`).

    config.backend == "ray"  ->  make_ray_policies(config) -> {agent: RayPolicy}

Pieces: `.options` (the `ray:` schema), `.cluster` (connection, placement group,
actors), `.policy` (proxy, failures, traffic meter), `.worker` (the actor). How to
run on several nodes: docs/scale-out.md. Names load on first use (PEP 562).

Modules:

cluster           start one `PolicyWorker` per agent in one placement group
connection        join (or start) the Ray cluster; model names the actors can load
options           the `ray:` section of a run config
policy            `RayPolicy`: the driver-side proxy of one actor
worker            what runs in one agent's actor: policy, optimizer, algorithm
"""

from __future__ import annotations

from graft_env.lazy import lazy_exports

_EXPORTS = {
    "AgentFailure": "algorithms.training.ray.policy",
    "ClusterError": "algorithms.training.ray.connection",
    "PendingCall": "algorithms.training.ray.policy",
    "RayOptions": "algorithms.training.ray.options",
    "RayPolicy": "algorithms.training.ray.policy",
    "TrafficMeter": "algorithms.training.ray.policy",
    "make_ray_policies": "algorithms.training.ray.cluster",
    "parse_ray_options": "algorithms.training.ray.options",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
