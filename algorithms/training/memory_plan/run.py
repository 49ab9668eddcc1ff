"""A run config's memory plan: each agent's options and workload, the devices its GPU agents
compute on, and their plans on the GPUs given or found."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from algorithms.training.memory_plan.architecture import architecture_of
from algorithms.training.memory_plan.device import DevicePlan
from algorithms.training.memory_plan.terms import PolicyPlan, Workload, plan_policy
from algorithms.training.ray.options import parse_ray_options
from graft_env.policies.options import HFPolicyOptions

if TYPE_CHECKING:
    from algorithms.training.run_config import TrainConfig

LOADER_OPTIONS = ("rollout_backend", "cache_dir", "tiny_seed")
"""Agent options that `load_policy` takes itself (not `HFPolicyOptions` fields)."""


def policy_options(options: Mapping[str, Any]) -> HFPolicyOptions:
    """An agent's `HFPolicyOptions`, without the loader's own and the vLLM engine's."""
    fields = {
        key: value
        for key, value in options.items()
        if key not in LOADER_OPTIONS and not key.startswith("vllm_")
    }
    return HFPolicyOptions.from_kwargs(**fields)


def agent_device(options: HFPolicyOptions, index: int, backend: str) -> str:
    """The device an agent computes on: its own GPU per Ray actor, else its `device`."""
    if backend == "ray":
        return f"actor {index}: cuda"
    return "cuda:0" if options.device == "cuda" else options.device


def run_workload(config: TrainConfig, prompt_tokens: int) -> Workload:
    """What a step of `config` (a `TrainConfig`) asks of each policy."""
    from algorithms import configure

    algorithm = configure(config.algorithm, **config.algorithm_options)
    rows = config.env.batch_size * algorithm.n // algorithm.num_minibatches
    response = config.sampling.max_new_tokens
    return Workload(prompt_tokens, response, max(rows, 1), reference=algorithm.kl_coef > 0)


def plan_run(config: TrainConfig, work: Workload, capacity: float, gpus: int) -> list[DevicePlan]:
    """Every GPU device's plan for `config` (a `TrainConfig`) on `gpus` devices of
    `capacity` bytes each; CPU agents are not planned. Raises ValueError (one line) when the
    config names a GPU that is not there."""
    devices: dict[str, list[tuple[int, str, PolicyPlan]]] = {}
    ray = config.backend == "ray"
    # the ray: section's own default (0: CPU actors, nothing on a GPU to plan)
    per_agent = int(parse_ray_options(config.ray).num_gpus_per_agent) if ray else 0
    if ray and per_agent == 0:
        return []
    if ray and per_agent * len(config.agents) > gpus:
        raise ValueError(
            f"ray.num_gpus_per_agent: {len(config.agents)} agents x {per_agent} GPUs, "
            f"{gpus} GPU(s) given"
        )
    for index, agent in enumerate(config.agents):
        options = policy_options(agent.options)
        budget = options.max_tokens_per_micro_batch
        if budget is not None and budget < work.row_tokens:
            raise ValueError(
                f"agents.{index}.options.max_tokens_per_micro_batch: {budget} is below one row "
                f"of {work.prompt_tokens} prompt + {work.response_tokens} response tokens "
                "(a longer row is refused when it comes)"
            )
        device = agent_device(options, index, config.backend)
        if device.startswith("cpu"):
            continue
        number = int(device.partition(":")[2] or 0) if not ray else 0
        if number >= gpus:
            raise ValueError(f"agents.{index}.options.device: {device!r}, {gpus} GPU(s) given")
        arch = architecture_of(agent.model, f"agents.{index}.model")
        plan = plan_policy(arch, options, work)
        devices.setdefault(device, []).append((index, agent.name, plan))
    return [DevicePlan(name, capacity, tuple(agents)) for name, agents in devices.items()]


def found_gpus() -> tuple[float, int]:
    """(bytes of the smallest GPU, how many) that torch.cuda finds; (0, 0) without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return 0.0, 0
    count = torch.cuda.device_count()
    return float(min(torch.cuda.get_device_properties(i).total_memory for i in range(count))), count
