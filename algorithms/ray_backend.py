"""Ray backend of the training loop (`backend: ray` in a run config).

Each agent runs in its own Ray actor that owns its model, optimizer and sampler
(an `HFPolicy` built by `load_policy`, as the local backend builds it) and its own
copy of the run's algorithm. The loop talks to `RayPolicy` proxies through the
ordinary Policy protocol; only strings, token ids and float arrays cross between
processes. Ray is an optional extra: importing this module needs `ray` installed.

    config.backend == "ray"  ->  make_ray_policies(config) -> {agent: RayPolicy}

Pieces: `algorithms.ray.options` (the `ray:` schema), `.cluster` (connection,
placement group, actors), `.policy` (proxy, failures, traffic meter), `.worker`
(the actor). How to run on GPUs and several nodes: docs/scale-out.md.
"""

from algorithms.ray.cluster import ClusterError, make_ray_policies
from algorithms.ray.options import RayOptions, parse_ray_options
from algorithms.ray.policy import AgentFailure, PendingCall, RayPolicy, TrafficMeter

__all__ = [
    "AgentFailure",
    "ClusterError",
    "PendingCall",
    "RayOptions",
    "RayPolicy",
    "TrafficMeter",
    "make_ray_policies",
    "parse_ray_options",
]
