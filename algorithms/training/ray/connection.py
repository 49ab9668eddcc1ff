"""Join (or start) the run's Ray cluster, and name models so that the actors can load them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import ray

from algorithms.training.ray.options import RayOptions
from graft_env.policies import TINY_NAMES

log = logging.getLogger(__name__)


class ClusterError(RuntimeError):
    """The Ray cluster cannot host the run as configured; the message says what is missing."""


def connect(options: RayOptions, needs: Mapping[str, float] | None = None) -> None:
    """Join the configured cluster, or start a private local one (`ray.address: null`).

    A private local cluster cannot grow, so if it lacks the run's `needs` in all (resource ->
    amount, e.g. every agent's GPUs) this fails at once, naming what is missing, rather than
    waiting `ray.placement_timeout_s` for resources that cannot come."""
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
        _check_local_capacity(needs or {})
    else:
        ray.init(address=options.address)


def _check_local_capacity(needs: Mapping[str, float]) -> None:
    have = ray.cluster_resources()  # ray.num_cpus / ray.num_gpus where set, else detected
    short = {key: (amount, have.get(key, 0)) for key, amount in needs.items()}
    short = {key: pair for key, pair in short.items() if pair[0] > pair[1] + 1e-9}
    if short:
        ray.shutdown()
        missing = ", ".join(
            f"{need:g} {key} (the cluster has {got:g})" for key, (need, got) in short.items()
        )
        raise ClusterError(
            f"the run needs {missing} on the local Ray cluster it starts (ray.address: null); "
            "its resources are ray.num_cpus / ray.num_gpus where set, else what this machine "
            "has; run it where they suffice, lower ray.num_gpus_per_agent / "
            "ray.num_cpus_per_agent, or join a cluster with ray.address"
        )


def model_reference(model: str) -> str:
    """A model path that exists here is made absolute: actors may run in another cwd.

    Tiny-pair names stay names, as `load_policy` reads them before any path.
    """
    path = Path(model)
    return str(path.absolute()) if model not in TINY_NAMES and path.exists() else model
