"""A run's every setting after presets and defaults: what `resolved_config.yaml` records.

A run's `config.yaml` holds what was written (its option sections hold no defaults, so a
resume compares what the user chose); the resolved config adds what the run then used: the
algorithm's whole `AlgorithmConfig` (its registry preset plus `algorithm_options`: eps_high,
delta, adv_ddof, ...), each agent's policy options with their defaults (the vLLM engine's only
for a vLLM agent), and the Ray options of a Ray run. TensorBoard's hparams and wandb's config
show it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from algorithms.storage.yaml_schema import plain

if TYPE_CHECKING:
    from algorithms.config import AlgorithmConfig
    from algorithms.training.run_config.train_config import TrainConfig


def option_defaults(option_class: type, prefix: str = "") -> dict[str, Any]:
    """The default of each field of `option_class` that has one, keyed `prefix + name`."""
    defaults = {}
    for item in dataclasses.fields(option_class):
        if item.default is not dataclasses.MISSING:
            defaults[prefix + item.name] = item.default
        elif item.default_factory is not dataclasses.MISSING:
            defaults[prefix + item.name] = item.default_factory()
    return plain(defaults)


def agent_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """An agent's policy options with every default `load_policy` applies (the vLLM engine's
    `vllm_<field>` ones only when the agent samples with vLLM)."""
    from graft_env.policies.options import policy_option_classes

    defaults: dict[str, Any] = {}
    for prefix, option_class in policy_option_classes():
        defaults.update(option_defaults(option_class, prefix))
    if options.get("rollout_backend", defaults["rollout_backend"]) != "vllm":
        engine = tuple(prefix for prefix, _ in policy_option_classes() if prefix)
        defaults = {key: value for key, value in defaults.items() if not key.startswith(engine)}
    return {**defaults, **plain(dict(options))}


def resolved_config(config: TrainConfig, algorithm: AlgorithmConfig) -> dict[str, Any]:
    """`config` as plain data with every option its run uses: `algorithm`'s whole config,
    each agent's policy options and (a Ray run) the Ray options, defaults included."""
    data = config.to_dict()
    data["algorithm_options"] = plain(dataclasses.asdict(algorithm))
    for agent in data["agents"]:
        agent["options"] = agent_options(agent["options"])
    if config.backend == "ray":
        from algorithms.training.ray.options import RayOptions

        data["ray"] = {**option_defaults(RayOptions), **data["ray"]}
    return data


def flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested plain data as `dotted.key: value` pairs (lists by index; an empty list or
    mapping is a value): TensorBoard's hparams take one level of scalars."""
    if isinstance(data, Mapping) and data:
        items = data.items()
    elif isinstance(data, list) and data:
        items = ((str(index), value) for index, value in enumerate(data))
    else:  # a scalar, or an empty list or mapping: kept as it is
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out
