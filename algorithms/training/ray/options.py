"""The `ray:` section of a run config: where the cluster is and what each agent gets.

`TrainConfig.ray` is a free-form mapping so that the core config does not depend on Ray
(and a run's saved config keeps only what was written); `RayOptions` is its schema, typed
fields with help that `graft config show` lists as `ray.<key>`. `parse_ray_options` checks
every key and a bad one raises a one-line `ConfigError` naming `ray.<key>`, before any
cluster is contacted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from algorithms.storage.yaml_schema import ConfigError
from graft_env.schema import (
    Count,
    Flag,
    NonNegative,
    OptionError,
    Positive,
    PositiveNumber,
    Text,
    check_fields,
    check_options,
    require,
)

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_LOCAL_CLUSTER_ONLY = ("num_cpus", "num_gpus", "include_dashboard")


@dataclass(frozen=True)
class RayOptions:
    """Options of the Ray backend (`backend: ray`); see docs/scale-out.md."""

    address: Text | None = field(
        default=None,
        metadata={
            "help": (
                "null starts a private local cluster for this run; 'auto' joins the cluster started"
                " on this machine with `ray start`; 'host:6379' joins a remote head; "
                "'ray://host:10001' connects through Ray Client"
            )
        },
    )
    num_cpus: Positive | None = field(
        default=None,
        metadata={
            "help": "CPUs of the local cluster started when address is null (null: the machine's)"
        },
    )
    num_gpus: Count | None = field(
        default=None,
        metadata={
            "help": "GPUs of the local cluster started when address is null (null: the machine's)"
        },
    )
    num_cpus_per_agent: PositiveNumber = field(
        default=1.0, metadata={"help": "CPUs reserved for each agent's actor"}
    )
    num_gpus_per_agent: NonNegative = field(
        default=0.0,
        metadata={
            "help": (
                "GPUs reserved for each agent's actor: a fraction below 1 (agents sharing a GPU) or"
                " a whole number"
            )
        },
    )
    placement_strategy: Literal[PLACEMENT_STRATEGIES] = field(
        default="PACK",
        metadata={"help": "how the placement group of one bundle per agent is laid out over nodes"},
    )
    placement_timeout_s: PositiveNumber = field(
        default=300.0,
        metadata={
            "help": (
                "how long to wait for the cluster to grant every bundle; the run fails with the "
                "missing resources named instead of waiting forever"
            )
        },
    )
    call_timeout_s: PositiveNumber | None = field(
        default=None,
        metadata={
            "help": (
                "longest wait for one remote call (generate, update, ...) once the actors have "
                "started; null waits as long as the actor is alive. A dead actor is reported at "
                "once"
            )
        },
    )
    torch_threads: Positive | None = field(
        default=None,
        metadata={
            "help": (
                "torch intra-op threads inside each actor; null uses the whole number of reserved "
                "CPUs (at least 1). One thread makes CPU runs reproducible"
            )
        },
    )
    runtime_env: Mapping[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Ray runtime environment of the actors (env_vars, working_dir, ...)"},
    )
    include_dashboard: Flag = field(
        default=False, metadata={"help": "start the dashboard with a local cluster (slower start)"}
    )

    def __post_init__(self) -> None:
        where = type(self).__name__
        check_fields(self, where)
        if self.address == "":
            raise require(where, "address", "", "null or a non-empty string")
        gpus = self.num_gpus_per_agent
        if gpus > 1 and gpus != int(gpus):
            raise require(where, "num_gpus_per_agent", gpus, "a whole number of GPUs above 1")

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


def parse_ray_options(data: Mapping[str, Any], where: str = "ray") -> RayOptions:
    """Validate the `ray:` mapping of a TrainConfig; errors name the key (`ray.<key>`)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    try:
        check_options(RayOptions, data, where)
        options = RayOptions(**data)
    except OptionError as error:
        raise error.at(where) from None
    local_only = [key for key in _LOCAL_CLUSTER_ONLY if key in data]
    if options.address is not None and local_only:
        raise ConfigError(
            f"{where}.{local_only[0]}: only applies to the local cluster started when "
            f"ray.address is null; the cluster at {options.address!r} was started with its "
            "own settings"
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
