"""Join (or start) the run's Ray cluster, and name models so that the actors can load them.

Shared by both layouts: one `PolicyWorker` per agent (`cluster`) and worker groups
(`group`, `placement`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import ray

from algorithms.training.ray.options import RayOptions
from graft_env.policies import TINY_NAMES

log = logging.getLogger(__name__)


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


def model_reference(model: str) -> str:
    """A model path that exists here is made absolute: actors may run in another cwd.

    Tiny-pair names stay names, as `load_policy` reads them before any path.
    """
    path = Path(model)
    return str(path.absolute()) if model not in TINY_NAMES and path.exists() else model
