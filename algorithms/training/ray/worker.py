"""What runs inside one agent's Ray actor: the policy, its optimizer, its algorithm.

The actor builds its `HFPolicy` with `load_policy(model, **options)`, exactly as the
local backend does, so the same config gives the same model either way. The loss
is not shipped with each `update`: the actor builds the run's `Algorithm` once from
its registry name and options (both plain data) and trains with that algorithm's
`loss`. `RayPolicy.update` checks on the driver that the loss the loop passes is
that same algorithm's, so the two can never silently differ.

Only strings, token ids, numbers and numpy arrays (inside the plain dataclasses of
`graft_env.types` and `policies.base`) go in and out of these methods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import ray
import torch

import algorithms
from graft_env.policies import Generation, SamplingParams, load_policy
from graft_env.types import ScoredText, TrainBatch


class PolicyWorker:
    """One agent's policy and learning rule, living in its own process."""

    def __init__(
        self,
        model: str,
        policy_options: Mapping[str, Any],
        algorithm: str,
        algorithm_options: Mapping[str, Any],
        torch_threads: int,
    ) -> None:
        torch.set_num_threads(torch_threads)
        self.algorithm = algorithms.make(algorithm, **dict(algorithm_options))
        self.policy = load_policy(model, **dict(policy_options))

    def describe(self) -> dict[str, Any]:
        """The policy's Policy-protocol attributes and where the actor runs."""
        context = ray.get_runtime_context()
        return {
            "name": self.policy.name,
            "temperature": float(self.policy.temperature),
            "node_id": context.get_node_id(),
            "gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()],
            "device": str(self.policy.device),
            "torch_threads": torch.get_num_threads(),
        }

    def format_prompt(self, problem: str) -> str:
        return self.policy.format_prompt(problem)

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        return self.policy.generate(prompts, n, sampling)

    def score(
        self, prompts: Sequence[str], responses: Sequence[str], finish_reasons: Sequence[str]
    ) -> list[ScoredText]:
        return self.policy.score(prompts, responses, finish_reasons)

    def update(self, batch: TrainBatch) -> dict[str, float]:
        return self.policy.update(batch, self.algorithm.loss)

    def save(self, path: str) -> None:
        self.policy.save(path)

    def load(self, path: str) -> None:
        self.policy.load(path)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The weights as numpy arrays (bfloat16 widened to float32, which is exact)."""
        state = {}
        for key, tensor in self.policy.model.state_dict().items():
            tensor = tensor.detach().cpu()
            if tensor.dtype == torch.bfloat16:
                tensor = tensor.float()
            state[key] = tensor.numpy().copy()
        return state
