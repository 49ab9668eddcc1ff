"""The `ray:` section of a run config: where the cluster is and what each agent gets.

`TrainConfig.ray` is a free-form mapping so that the core config does not depend on
Ray; this module is its schema. Every key is checked here and a bad one raises a
`ConfigError` naming `ray.<key>`, before any cluster is contacted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from algorithms.training.run_config import ConfigError

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass(frozen=True)
class RayOptions:
    """Options of the Ray backend (`backend: ray`); see docs/scale-out.md.

    address: None starts a private local cluster for this run; "auto" joins the
        cluster started on this machine with `ray start`; "host:6379" joins a remote
        head; "ray://host:10001" connects through Ray Client.
    num_cpus, num_gpus: size of the local cluster started when address is None
        (None: what the machine has). Ray only accepts them when it starts a cluster.
    num_cpus_per_agent, num_gpus_per_agent: resources reserved for each agent's actor.
        GPUs may be a fraction below 1 (agents sharing a GPU) or a whole number.
    placement_strategy: how the placement group that holds one bundle per agent is
        laid out over nodes (Ray's PACK, SPREAD, STRICT_PACK, STRICT_SPREAD).
    placement_timeout_s: how long to wait for the cluster to grant every bundle; the
        run fails with the missing resources named instead of waiting forever.
    call_timeout_s: longest wait for one remote call (generate, update, ...) once the
        actors have started; None waits as long as the actor is alive. A dead actor is
        reported at once either way.
    torch_threads: torch intra-op threads inside each actor; None uses the whole
        number of reserved CPUs (at least 1). One thread makes CPU runs reproducible.
    runtime_env: Ray runtime environment of the actors (env_vars, working_dir, ...).
    include_dashboard: start the dashboard with a local cluster (slower start).
    """

    address: str | None = None
    num_cpus: int | None = None
    num_gpus: int | None = None
    num_cpus_per_agent: float = 1.0
    num_gpus_per_agent: float = 0.0
    placement_strategy: str = "PACK"
    placement_timeout_s: float = 300.0
    call_timeout_s: float | None = None
    torch_threads: int | None = None
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    include_dashboard: bool = False

    @property
    def threads(self) -> int:
        """Torch threads each actor runs with."""
        if self.torch_threads is not None:
            return self.torch_threads
        return max(1, math.floor(self.num_cpus_per_agent))

    def bundle(self) -> dict[str, float]:
        """The resources of one agent, as a placement-group bundle."""
        resources = {"CPU": self.num_cpus_per_agent}
        if self.num_gpus_per_agent:
            resources["GPU"] = self.num_gpus_per_agent
        return resources


# key: (integer?, lower bound, bound excluded?, None allowed?)
_NUMBERS = {
    "num_cpus": (True, 1, False, True),
    "num_gpus": (True, 0, False, True),
    "num_cpus_per_agent": (False, 0, True, False),
    "num_gpus_per_agent": (False, 0, False, False),
    "placement_timeout_s": (False, 0, True, False),
    "call_timeout_s": (False, 0, True, True),
    "torch_threads": (True, 1, False, True),
}
_LOCAL_CLUSTER_ONLY = ("num_cpus", "num_gpus", "include_dashboard")


def _number(key: str, value: Any) -> Any:
    integer, bound, exclusive, allow_none = _NUMBERS[key]
    if value is None and allow_none:
        return None
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"ray.{key}: expected {kind}, got {value!r}")
    if value < bound or (exclusive and value == bound):
        raise ConfigError(f"ray.{key}: must be {'>' if exclusive else '>='} {bound}, got {value!r}")
    return value


def parse_ray_options(data: Mapping[str, Any]) -> RayOptions:
    """Validate the `ray:` mapping of a TrainConfig; errors name the key."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"ray: expected a mapping, got {type(data).__name__}")
    valid = [f.name for f in dataclasses.fields(RayOptions)]
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise ConfigError(f"ray: unknown key(s) {unknown}; valid keys: {valid}")
    values = {key: _number(key, v) if key in _NUMBERS else v for key, v in data.items()}
    options = RayOptions(**values)
    address = options.address
    if address is not None and (not isinstance(address, str) or not address):
        raise ConfigError(f"ray.address: expected null or a non-empty string, got {address!r}")
    local_only = [key for key in _LOCAL_CLUSTER_ONLY if key in data]
    if address is not None and local_only:
        raise ConfigError(
            f"ray.{local_only[0]}: only applies to the local cluster started when ray.address "
            f"is null; the cluster at {address!r} was started with its own settings"
        )
    gpus = options.num_gpus_per_agent
    if gpus > 1 and gpus != int(gpus):
        raise ConfigError(
            f"ray.num_gpus_per_agent: above 1 it must be a whole number of GPUs, got {gpus!r}"
        )
    if options.placement_strategy not in PLACEMENT_STRATEGIES:
        raise ConfigError(
            f"ray.placement_strategy: expected one of {list(PLACEMENT_STRATEGIES)}, "
            f"got {options.placement_strategy!r}"
        )
    if not isinstance(options.runtime_env, Mapping):
        raise ConfigError(
            f"ray.runtime_env: expected a mapping, got {type(options.runtime_env).__name__}"
        )
    if not isinstance(options.include_dashboard, bool):
        raise ConfigError(
            f"ray.include_dashboard: expected true or false, got {options.include_dashboard!r}"
        )
    return options


def check_agent_devices(agents: Any, options: RayOptions) -> None:
    """Refuse device settings that cannot work inside an actor with these resources.

    Ray makes only the GPUs it reserved for an actor visible to it, so `device:
    cuda` with no GPU reserved fails inside the actor, and reserved GPUs with the
    default `device: cpu` would hold GPUs while training on the CPU.
    """
    for index, agent in enumerate(agents):
        device = str(agent.options.get("device", "cpu"))
        wants_gpu = device.startswith("cuda")
        if wants_gpu and not options.num_gpus_per_agent:
            raise ConfigError(
                f"agents.{index}.options.device is {device!r} but ray.num_gpus_per_agent is 0: "
                "the actor would see no GPU"
            )
        if options.num_gpus_per_agent and not wants_gpu:
            raise ConfigError(
                f"ray.num_gpus_per_agent is {options.num_gpus_per_agent} but "
                f"agents.{index}.options.device is {device!r}: set device: cuda to use them"
            )
