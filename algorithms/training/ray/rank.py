"""One rank of an agent's worker group: a Ray actor on one device, in a torch.distributed
group with the agent's other ranks.

Started bare (`placement` answers where Ray put it), then `setup` joins the process
group (gloo on CPU, nccl on CUDA), loads the policy as `load_policy` builds it for one
process, shards it with FSDP2 and gives it an AdamW over the shards (`fsdp.sharded_policy`).
Every other method is collective: the driver (`group.GroupPolicy`) calls it on every
rank at once, each with its share of the rows (`split`), and gathers the answers. With
`GroupPolicy.time_calls` on, it calls them through `timed`, under the profiler.

With `rollout_backend: vllm` rank 0 also owns the agent's vLLM engine
(`vllm_policy.VLLMEngine`, its own processes, tensor-parallel over the group's devices:
`engine_settings`); `generate` runs there alone. Around every update the engine sleeps
(sleep mode) and then every rank joins the bucketed weight sync (`weight_sync`), which
also follows every `load`.
"""

from __future__ import annotations

import dataclasses
import socket
import time
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
from algorithms.training.ray.call_timing import RankTime, profiled
from algorithms.training.ray.fsdp import gathered, sharded_policy
from algorithms.training.ray.placement import where_placed
from algorithms.training.ray.sharded_update import first_minibatch_gradients, sharded_update
from algorithms.training.ray.weight_sync import MIB, sync_buckets
from graft_env.policies import Generation, HFPolicy, SamplingParams
from graft_env.policies.loading import DTYPES
from graft_env.policies.options import OPTION_PREFIX, VLLMEngineOptions
from graft_env.types import ScoredText, TrainBatch


class RankWorker:
    """Rank `rank` of `world` ranks of one agent's policy."""

    def __init__(self, rank: int, world: int, torch_threads: int) -> None:
        torch.set_num_threads(torch_threads)
        self.rank, self.world = rank, world
        self.policy: HFPolicy | None = None
        self.engine: Any = None  # rank 0 with rollout_backend vllm: a VLLMEngine
        self.bucket_bytes = 0  # > 0 when the group has an engine to sync

    def timed(self, method: str, *args: Any) -> tuple[Any, RankTime]:
        """`method(*args)` under the profiler (`call_timing.profiled`): its answer and its
        times. How `GroupPolicy` calls every method once its `time_calls` is on."""
        return profiled(lambda: getattr(self, method)(*args))

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
        engine: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Join the process group, load and shard the policy (and on rank 0 start the vLLM
        engine `engine` describes: `group.engine_spec`); returns its attributes."""
        options = dict(policy_options)
        options.pop("rollout_backend", None)  # the trainer is a transformers policy
        prefixed = {k: options.pop(k) for k in list(options) if k.startswith(OPTION_PREFIX)}
        cuda = str(options.get("device", "cpu")).startswith("cuda")
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
        policy = sharded_policy(model, options)
        self.policy = policy
        if engine is not None:
            self.bucket_bytes = int(engine["sync_bucket_mb"] * MIB)
            if self.rank == 0:
                self.engine = self._start_engine(VLLMEngineOptions.from_prefixed(prefixed), engine)
        return {
            "name": policy.name,
            "temperature": float(policy.temperature),
            "generation_batch_size": policy.options.generation_batch_size,
            "device": str(policy.device),
            "backend": dist.get_backend(),
            "torch_threads": torch.get_num_threads(),
            **self.placement(),
        }

    def _start_engine(self, options: VLLMEngineOptions, engine: Mapping[str, Any]) -> Any:
        from graft_env.policies.vllm_policy import VLLMEngine

        return VLLMEngine(
            self.policy,
            options,
            max_model_len=engine["max_model_len"],
            tensor_parallel_size=engine["tensor_parallel_size"],
            sleep_mode=engine["enable_sleep_mode"],
            visible_devices=engine["visible_devices"],
        )

    def sync_engine(self) -> dict[str, float]:
        """(every rank) The trainer's weights into the engine, bucket by bucket
        (`weight_sync.sync_buckets`); the sync's figures on rank 0, {} elsewhere."""
        from graft_env.policies.vllm_policy import shared_buffer

        policy, engine = self.policy, self.engine
        buffers: list[Any] = []

        def staging(nbytes: int) -> torch.Tensor:
            buffer, handle = shared_buffer(nbytes, policy.device)
            buffers.append(handle)
            return buffer

        untouched: list[str] = []

        def load(slots: list) -> None:
            if policy.device.type == "cuda":
                torch.cuda.synchronize(policy.device)  # the engine reads the buffer next
            untouched[:] = engine.load(buffers[0], slots)

        try:
            stats = sync_buckets(
                policy.model,
                DTYPES[policy.compute_dtype],
                self.bucket_bytes,
                owner=engine is not None,
                staging=staging if engine is not None else None,
                load=load if engine is not None else None,
            )
        finally:
            if buffers and buffers[0][0] == "file":
                Path(buffers[0][1]).unlink(missing_ok=True)  # the engine has it open
        if engine is None:
            return {}
        if untouched:
            raise RuntimeError(
                f"{policy.name}: weight sync left engine parameters {untouched} unset; the "
                "engine's model does not match the trained one"
            )
        engine.loaded()
        return {
            "sync/buckets": float(stats.buckets),
            "sync/staging_mib": stats.staging_bytes / MIB,
            "sync/peak_gathered_mib": stats.peak_gathered_bytes / MIB,
        }

    def generate_engine(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        """(rank 0 only) Every prompt sampled by the group's vLLM engine."""
        return self.engine.generate(prompts, n, sampling)

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
        """The sharded update; with an engine, it sleeps through it and is synced after."""
        if self.engine is not None:
            self.engine.sleep()
        metrics = sharded_update(self.policy, batch, self.algorithm.loss)
        if self.bucket_bytes:
            started = time.perf_counter()
            if self.engine is not None:
                self.engine.wake_up()
            metrics.update(self.sync_engine())
            metrics["time/weight_sync"] = time.perf_counter() - started
        return metrics

    def save(self, path: str) -> None:
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        sharded_checkpoint.save(self.policy, directory)

    def load(self, path: str) -> None:
        sharded_checkpoint.load(self.policy, Path(path))
        if self.bucket_bytes:
            self.sync_engine()

    def close_engine(self) -> None:
        """Stop the engine's processes (rank 0; a no-op elsewhere)."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None

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
