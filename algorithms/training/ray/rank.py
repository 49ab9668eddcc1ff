"""One rank of an agent's worker group: a Ray actor on one device, in a torch.distributed
group with the agent's other ranks.

Started bare (`placement` answers where Ray put it), then `setup` joins the process
group (gloo on CPU, nccl on CUDA), loads the policy as `load_policy` builds it for one
process, shards it with FSDP2 (`fsdp.shard`) and gives it an AdamW over the shards.
Every other method is collective: the driver (`group.GroupPolicy`) calls it on every
rank at once, each with its share of the rows (`split`), and gathers the answers.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

import algorithms
from algorithms.training.ray import sharded_checkpoint
from algorithms.training.ray.fsdp import gathered, shard
from algorithms.training.ray.placement import where_placed
from algorithms.training.ray.sharded_update import first_minibatch_gradients, sharded_update
from graft_env.policies import Generation, HFPolicy, SamplingParams, load_policy
from graft_env.types import ScoredText, TrainBatch


class RankWorker:
    """Rank `rank` of `world` ranks of one agent's policy."""

    def __init__(self, rank: int, world: int, torch_threads: int) -> None:
        torch.set_num_threads(torch_threads)
        self.rank, self.world = rank, world
        self.policy: HFPolicy | None = None

    def placement(self) -> dict[str, Any]:
        """Where Ray put this rank (`placement.where_placed`)."""
        return where_placed(self.rank)

    def rendezvous(self) -> str:
        """(rank 0) A `tcp://host:port` on this node for the group's process group."""
        host = ray.util.get_node_ip_address()
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
        return f"tcp://{host}:{port}"

    def setup(
        self,
        init_method: str,
        model: str,
        policy_options: Mapping[str, Any],
        algorithm: str,
        algorithm_options: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Join the process group, load and shard the policy; returns its attributes."""
        cuda = str(policy_options.get("device", "cpu")).startswith("cuda")
        if cuda:
            torch.cuda.set_device(0)  # Ray shows each rank only its own GPU
        dist.init_process_group(
            "nccl" if cuda else "gloo",
            init_method=init_method,
            rank=self.rank,
            world_size=self.world,
            timeout=timedelta(minutes=30),
        )
        self.algorithm = algorithms.make(algorithm, **dict(algorithm_options))
        policy = load_policy(model, **dict(policy_options))
        if type(policy) is not HFPolicy:
            raise ValueError(
                f"a worker group shards a transformers policy; {model!r} loads as "
                f"{type(policy).__name__}"
            )
        shard(policy.model, policy.device)
        options = policy.options
        policy.optimizer = torch.optim.AdamW(
            policy.model.parameters(),
            lr=options.lr,
            betas=options.betas,
            weight_decay=options.weight_decay,
        )
        self.policy = policy
        return {
            "name": policy.name,
            "temperature": float(policy.temperature),
            "generation_batch_size": options.generation_batch_size,
            "device": str(policy.device),
            "backend": dist.get_backend(),
            "torch_threads": torch.get_num_threads(),
            **self.placement(),
        }

    def format_prompt(self, problem: str) -> str:
        return self.policy.format_prompt(problem)

    def generate(
        self, blocks: Sequence[tuple[Sequence[str], int]], n: int, sampling: SamplingParams
    ) -> list[list[list[Generation]]]:
        """Each (prompts, seed) block sampled on the whole (gathered) model."""
        with torch.no_grad(), gathered(self.policy.model):
            return [
                self.policy.generate(prompts, n, dataclasses.replace(sampling, seed=seed))
                for prompts, seed in blocks
            ]

    def score(
        self, prompts: Sequence[str], responses: Sequence[str], finish_reasons: Sequence[str]
    ) -> list[ScoredText]:
        with torch.no_grad(), gathered(self.policy.model):
            if not prompts:
                return []
            return self.policy.score(prompts, responses, finish_reasons)

    def update(self, batch: TrainBatch) -> dict[str, float]:
        return sharded_update(self.policy, batch, self.algorithm.loss)

    def save(self, path: str) -> None:
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        sharded_checkpoint.save(self.policy, directory)

    def load(self, path: str) -> None:
        sharded_checkpoint.load(self.policy, Path(path))

    def state_dict(self) -> dict[str, np.ndarray]:
        """(rank 0) the full weights as float32 numpy arrays; {} on other ranks."""
        full = get_model_state_dict(
            self.policy.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        return {key: t.float().numpy().copy() for key, t in full.items()} if self.rank == 0 else {}

    def gradients(self, batch: TrainBatch) -> tuple[float, dict[str, np.ndarray]]:
        """(rank 0) the grad norm and full gradients of `batch`'s first minibatch, no step
        taken (`sharded_update.first_minibatch_gradients`); (norm, {}) on other ranks."""
        norm, full = first_minibatch_gradients(self.policy, batch, self.algorithm.loss)
        if self.rank != 0:
            return norm, {}
        return norm, {name: t.float().cpu().numpy() for name, t in full.items()}
