"""Ray backend of the training loop (`backend: ray` in a run config).

Each agent runs in its own Ray actor that owns its model, optimizer and sampler
(an `HFPolicy` built by `load_policy`, as the local backend builds it) and its own
copy of the run's algorithm. The loop talks to `RayPolicy` proxies through the
ordinary Policy protocol; only strings, token ids and float arrays cross between
processes. Ray is an optional extra: the names below need `ray` installed, except
the `ray:` schema (`RayOptions`, `parse_ray_options`).

    config.backend == "ray"  ->  make_ray_policies(config) -> {agent: RayPolicy}
    ... with ray.ranks_per_agent: k  ->  {agent: GroupPolicy} (k FSDP2 ranks per agent)

Pieces: `.options` (the `ray:` schema), `.cluster` (connection, placement group,
actors), `.policy` (proxy, failures, traffic meter), `.worker` (the actor). How to
run on GPUs and several nodes: docs/scale-out.md. Names load on first use (PEP 562).

Modules:

call_timing       a worker group's call split: rank collectives, rank compute, driver overhead
cluster           start one `PolicyWorker` per agent in one placement group
connection        join (or start) the Ray cluster; model names the actors can load
engine_settings   a worker group's vLLM engine settings, derived and checked from the config
fsdp              FSDP2 on one rank: shard a transformers model, and gather it whole
group             `GroupPolicy`: one agent as a worker group of k ranks (`ray.ranks_per_agent`)
options           the `ray:` section of a run config
placement         worker groups' placement groups per agent, and the placement map of a run
policy            `RayPolicy`: the driver-side proxy of one actor
rank              one rank of a worker group: a Ray actor in a torch.distributed group
sharded_checkpoint  a worker group's checkpoint: DCP shards, RNG per rank, an HF export
sharded_update    one optimisation pass of a rank: its rows, the whole minibatch's loss
split             how a worker group divides one call's rows among its ranks
weight_sync       the FSDP2 shards gathered into the vLLM engine bucket by bucket
worker            what runs in one agent's actor: policy, optimizer, algorithm
"""

from __future__ import annotations

from graft_env.lazy import lazy_exports

_EXPORTS = {
    "AgentFailure": "algorithms.training.ray.policy",
    "ClusterError": "algorithms.training.ray.connection",
    "GroupPolicy": "algorithms.training.ray.group",
    "PendingCall": "algorithms.training.ray.policy",
    "RayOptions": "algorithms.training.ray.options",
    "RayPolicy": "algorithms.training.ray.policy",
    "TrafficMeter": "algorithms.training.ray.policy",
    "make_ray_policies": "algorithms.training.ray.cluster",
    "parse_ray_options": "algorithms.training.ray.options",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
