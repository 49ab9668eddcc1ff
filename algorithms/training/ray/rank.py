"""One rank of an agent's worker group: a Ray actor on one device, in a torch.distributed
group with the agent's other ranks.

Started bare (`placement` answers where Ray put it), then `setup` joins the process
group (gloo on CPU, nccl on CUDA), loads the policy as `load_policy` builds it for one
process, shards it with FSDP2 and gives it an AdamW over the shards (`fsdp.sharded_policy`).
Every other method is collective: the driver (`group.GroupPolicy`) calls it on every
rank at once, each with its share of the rows (`split`), and gathers the answers. With
`GroupPolicy.time_calls` on, it calls them through `timed`, under the profiler.

With `rollout_backend: vllm` the first rank of each engine replica also owns a vLLM engine
(`engine.llm.VLLMEngine`, its own processes, tensor-parallel over the replica's devices:
`engine_settings`), started once every rank has sharded (a barrier); `generate_engine`
samples there. The engine's memory follows `policies.engine.cycle` (generate, sleep at level
2, score and update asleep, empty_cache, wake weights, sync, empty_cache, wake the KV cache):
every rank joins the bucketed weight sync (`weight_sync`) after every update and `load`, and
staging buffers are per GPU. Each phase's GPU memory goes into the update's metrics
(`policies.engine.memory`). `close_engine` stops the engine and any process the rank started.
"""

from __future__ import annotations

import contextlib
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
from algorithms.training.ray.weight_sync import MIB, SyncStats, sync_buckets
from graft_env.policies import Generation, HFPolicy, SamplingParams
from graft_env.policies.engine.llm import request_seed
from graft_env.policies.engine.memory import PhaseMemory
from graft_env.policies.loading import DTYPES
from graft_env.policies.options import OPTION_PREFIX, VLLMEngineOptions
from graft_env.types import ScoredText, TrainBatch

SLEEP_LEVEL = 2  # every sync of a worker group rewrites every weight (`weight_sync`)


def engine_replicas(engine: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The engine replicas of `engine` (`group.engine_spec`): each one's ranks (the first
    owns it) and CUDA_VISIBLE_DEVICES; a spec without replicas is one engine on ranks
    0..tp-1."""
    default = {
        "ranks": list(range(engine["tensor_parallel_size"])),
        "visible_devices": engine["visible_devices"],
    }
    return list(engine.get("replicas") or [default])


def stop_children(timeout_s: float = 10.0) -> list[int]:
    """Terminate every process this one started (an engine core and its workers), kill
    those still alive after `timeout_s`; returns their pids."""
    import psutil

    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=timeout_s)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(alive, timeout=timeout_s)
    return [child.pid for child in children]


class RankWorker:
    """Rank `rank` of `world` ranks of one agent's policy."""

    def __init__(self, rank: int, world: int, torch_threads: int) -> None:
        torch.set_num_threads(torch_threads)
        self.rank, self.world = rank, world
        self.policy: HFPolicy | None = None
        self.engine: Any = None  # a replica's owner rank with rollout_backend vllm: a VLLMEngine
        self.cycle: Any = None  # the engine's lifecycle (`engine.cycle.EngineCycle`)
        self.bucket_bytes = 0  # > 0 when the group has an engine to sync
        self.sleep_mode = self.weights_lost = self.stages = False
        self.replica: int | None = None  # the engine replica whose GPUs include this rank's
        self.spans: list[list[int]] = []  # per replica: the ranks whose buffers it reads
        self.memory = PhaseMemory()

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
        """Join the process group, load and shard the policy; once every rank has sharded
        (a barrier), the replicas' owner ranks start their vLLM engines (`engine`:
        `group.engine_spec`). Returns the rank's attributes."""
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
            self._join_engine(VLLMEngineOptions.from_prefixed(prefixed), engine, cuda)
        return {
            "name": policy.name,
            "temperature": float(policy.temperature),
            "generation_batch_size": policy.options.generation_batch_size,
            "device": str(policy.device),
            "backend": dist.get_backend(),
            "torch_threads": torch.get_num_threads(),
            **self.placement(),
        }

    def _join_engine(
        self, options: VLLMEngineOptions, engine: Mapping[str, Any], cuda: bool
    ) -> None:
        """The rank's part in the group's engines: its replica, whether it stages a buffer,
        and (owner) the engine, started only after every rank has sharded and freed its
        full copy, so vLLM's memory profiler never sees another rank still loading."""
        from graft_env.policies.engine.cycle import EngineCycle
        from graft_env.policies.engine.llm import VLLMEngine

        self.bucket_bytes = int(engine["sync_bucket_mb"] * MIB)
        self.sleep_mode = bool(engine["enable_sleep_mode"])
        replicas = engine_replicas(engine)
        mine = [j for j, replica in enumerate(replicas) if self.rank in replica["ranks"]]
        self.replica = mine[0] if mine else None
        owner = self.replica is not None and replicas[self.replica]["ranks"][0] == self.rank
        # CUDA: every GPU of an engine worker holds a buffer; CPU: the owner's file serves all
        self.stages = owner or (cuda and self.replica is not None)
        self.spans = [list(r["ranks"]) if cuda else r["ranks"][:1] for r in replicas]
        dist.barrier()
        if owner:
            self.engine = VLLMEngine(
                self.policy,
                options,
                max_model_len=engine["max_model_len"],
                tensor_parallel_size=engine["tensor_parallel_size"],
                sleep_mode=self.sleep_mode,
                visible_devices=replicas[self.replica]["visible_devices"],
            )
            self.cycle = EngineCycle(self.engine, SLEEP_LEVEL, self.memory.release)

    def _asleep(self) -> None:
        """(every rank) The engine sleeps for what follows (scoring, the update); every rank
        notes that a level-2 sleep dropped its weights, so all agree when to resync."""
        if self.cycle is not None:
            self.cycle.asleep()
        if self.bucket_bytes and self.sleep_mode:
            self.weights_lost = True

    def sync_engine(self) -> dict[str, float]:
        """(every rank) The trainer's weights into the engines, bucket by bucket
        (`weight_sync.sync_buckets`), inside the lifecycle's steps 4-7 (`engine.cycle`); the
        sync's figures on rank 0, {} elsewhere."""
        with self.memory.phase("sync"):
            if self.cycle is not None:
                stats = self.cycle.sync(self._sync_buckets)
            else:
                self.memory.release("before_sync")
                stats = self._sync_buckets()
                self.memory.release("after_sync")
        self.weights_lost = False
        if self.rank != 0:
            return {}
        return {
            "sync/buckets": float(stats.buckets),
            "sync/staging_mib": stats.staging_bytes / MIB,
            "sync/peak_gathered_mib": stats.peak_gathered_bytes / MIB,
        }

    def _sync_buckets(self) -> SyncStats:
        from graft_env.policies.engine.staging import device_key, staging_buffer, unlink

        policy, engine = self.policy, self.engine
        own: list[Any] = []  # this rank's buffer handle, once allocated
        handles: dict[str, Any] = {}  # the owner's replica's buffers, by device key

        def staging(nbytes: int) -> torch.Tensor | None:
            buffer = None
            if self.stages:
                buffer, handle = staging_buffer(nbytes, policy.device)
                own.append(handle)
            entry = (device_key(policy.device), own[0]) if own else None
            everyone: list[Any] = [None] * self.world
            dist.all_gather_object(everyone, entry)  # each owner learns its workers' buffers
            if engine is not None:
                handles.update(everyone[r] for r in self.spans[self.replica])
            return buffer

        def fence() -> None:
            if policy.device.type == "cuda":
                torch.cuda.synchronize(policy.device)  # this rank's copies into its buffer
            dist.barrier()

        untouched: list[str] = []

        def load(slots: list) -> None:
            untouched[:] = engine.load(handles, slots, reused=True)

        try:
            stats = sync_buckets(
                policy.model,
                DTYPES[policy.compute_dtype],
                self.bucket_bytes,
                owner=engine is not None,
                staging=staging,
                load=load if engine is not None else None,
                fence=fence,
            )
        finally:
            for handle in own:
                unlink(handle)  # the engine has it open (CPU)
        if engine is not None:
            engine.loaded(release_buffers=True)  # the next sync allocates new buffers
        # no rank releases its staging (`empty_cache` + `ipc_collect`) before every owner's
        # workers let go of it: a freed buffer still mapped by a worker stays in torch's CUDA
        # IPC limbo list, which `ipc_collect` cannot empty, until the next sync
        dist.barrier()
        if untouched:
            raise RuntimeError(
                f"{policy.name}: weight sync left engine parameters {untouched} unset; "
                "the engine's model does not match the trained one"
            )
        return stats

    def generate_engine(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        """(every rank) `prompts` sampled by this rank's engine replica (owners; the other
        ranks get none and return []). The engine sleeps again right after; if a level-2
        sleep dropped its weights since the last sync, every rank resyncs them first."""
        if self.weights_lost:
            self.sync_engine()
        if self.engine is None or not prompts:
            self.weights_lost = self.sleep_mode
            return []
        if self.replica:  # replica j > 0 samples its own stream of the call's seed
            sampling = dataclasses.replace(sampling, seed=request_seed(sampling.seed, self.replica))
        with self.memory.phase("generate"):
            groups = self.cycle.generate(lambda: self.engine.generate(prompts, n, sampling))
        self.weights_lost = self.sleep_mode
        return groups

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
        self._asleep()  # scoring never runs beside the engine's KV cache
        with self.memory.phase("score"), torch.no_grad(), gathered(self.policy.model):
            if not prompts:
                return []
            return self.policy.score(prompts, responses, finish_reasons)

    def update(self, batch: TrainBatch) -> dict[str, float]:
        """The sharded update, the engine asleep; with an engine, the sync after it. The
        metrics carry the GPU memory of every phase since the last update (`engine.memory`)."""
        self._asleep()
        with self.memory.phase("update"):
            metrics = sharded_update(self.policy, batch, self.algorithm.loss)
        if self.bucket_bytes:
            started = time.perf_counter()
            metrics.update(self.sync_engine())
            metrics["time/weight_sync"] = time.perf_counter() - started
        return {**metrics, **self.memory.metrics()}

    def save(self, path: str) -> None:
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        sharded_checkpoint.save(self.policy, directory)

    def load(self, path: str) -> None:
        sharded_checkpoint.load(self.policy, Path(path))
        if self.bucket_bytes:
            self._asleep()
            self.sync_engine()

    def close_engine(self) -> None:
        """Stop the engine's processes (owners; a no-op elsewhere), then any child process
        of this rank still alive (`stop_children`): none outlives the run."""
        engine, self.engine, self.cycle = self.engine, None, None
        try:
            if engine is not None:
                engine.close()
        finally:
            stop_children()

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
