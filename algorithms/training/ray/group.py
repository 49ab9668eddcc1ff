"""`GroupPolicy`: one agent's policy as a worker group of k ranks (`ray.ranks_per_agent: k`).

Each agent gets its own placement group of k bundles, one per rank (`placement`: one GPU
per rank when `num_gpus_per_agent == k`, PACK on one node where they fit, agents apart
with `ray.one_agent_per_node`). Rank r of an agent runs in bundle r (`rank.RankWorker`);
the ranks form one torch.distributed group and shard the policy with FSDP2.

`GroupPolicy` speaks the Policy protocol to the loop as `RayPolicy` does: every method
is one call on every rank at once, each with its share of the rows (`split`), and the
answers merged back in row order. Failures stop the whole run (`ActorGroup`).

With `agents.N.options.rollout_backend: vllm` the agent's rank 0 owns a vLLM engine
whose settings the driver derives and checks before any actor starts
(`engine_settings`: max_model_len, tensor parallelism = the ranks, sleep mode, the GPU
memory share); `generate` goes to rank 0 whole (the engine is one for the group, its
tensor-parallel workers on the group's GPUs), `update` and `load` end with every rank in
the bucketed weight sync (`weight_sync`). A tensor-parallel engine spans one node: the
group's ranks must have been placed on one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import ray

import algorithms
from algorithms.algorithm import Algorithm
from algorithms.training import memory_plan
from algorithms.training.ray.call_timing import CallTime
from algorithms.training.ray.connection import connect, model_reference
from algorithms.training.ray.engine_settings import EngineSettings, engine_options, engine_settings
from algorithms.training.ray.options import RayOptions
from algorithms.training.ray.placement import (
    GroupLayout,
    group_needs,
    reserve_groups,
    start_actors,
)
from algorithms.training.ray.policy import (
    ActorGroup,
    PendingCall,
    TrafficMeter,
    check_driver_sees,
    check_loss,
)
from algorithms.training.ray.rank import RankWorker
from algorithms.training.ray.split import block_seed, prompt_blocks, row_chunks
from algorithms.training.run_config import TrainConfig
from graft_env.policies import Generation, LossFn, SamplingParams
from graft_env.types import ScoredText, TrainBatch


def rank_threads(options: RayOptions, ranks: int) -> int:
    """Torch threads per rank: `ray.torch_threads`, else the rank's whole CPUs (>= 1)."""
    if options.torch_threads is not None:
        return options.torch_threads
    return max(1, math.floor(options.num_cpus_per_agent / ranks))


def check_group_agents(config: TrainConfig, ranks: int) -> dict[str, EngineSettings]:
    """The vLLM engine settings of every agent with `rollout_backend: vllm`, derived and
    checked (`engine_settings`; the GPU memory share against the GPUs this driver sees,
    when it sees any) before any actor starts; a bad one is a one-line ConfigError."""
    capacity, count = memory_plan.found_gpus()
    work = memory_plan.run_workload(config, 1024) if count else None
    engines = {}
    for index, agent in enumerate(config.agents):
        if agent.options.get("rollout_backend", "transformers") != "vllm":
            continue
        arch = None
        if count:
            try:
                arch = memory_plan.architecture_of(agent.model, f"agents.{index}.model")
            except memory_plan.UnknownArchitecture:
                arch = None  # not sized here; vLLM itself refuses a share that cannot hold it
        engines[agent.name] = engine_settings(
            index,
            agent.options,
            config.sampling.max_new_tokens,
            ranks,
            architecture=arch,
            work=work,
            capacity=capacity if count else None,
        )
    return engines


def engine_spec(
    settings: EngineSettings, options: Mapping[str, Any], placements: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """What the ranks join their engines with (`RankWorker.setup`'s `engine`), from the ranks'
    placements: replica j spans ranks j*tp .. j*tp+tp-1 (the first owns it) and its processes
    see those ranks' GPUs in that order. A tensor-parallel replica needs its ranks on one node
    (ValueError otherwise)."""
    tp = settings.tensor_parallel_size
    replicas = []
    for j in range(settings.data_parallel_size):
        ranks = list(range(j * tp, (j + 1) * tp))
        spanned = [placements[r] for r in ranks]
        nodes = {placement["node_id"] for placement in spanned}
        if len(nodes) > 1:
            raise ValueError(
                f"vLLM engine replica {j}'s {tp} tensor-parallel workers need their ranks on "
                f"one node, Ray placed them on {len(nodes)} (ray.placement_strategy "
                "STRICT_PACK keeps a group on one node)"
            )
        gpus = [gpu for placement in spanned for gpu in placement["gpu_ids"]]
        replicas.append({"ranks": ranks, "visible_devices": ",".join(gpus) if gpus else None})
    return {
        **settings.llm_kwargs(),
        "sync_bucket_mb": engine_options(options, "options").sync_bucket_mb,
        "visible_devices": replicas[0]["visible_devices"],
        "replicas": replicas,
    }


def make_group_policies(
    config: TrainConfig, options: RayOptions, layout: GroupLayout
) -> dict[str, GroupPolicy]:
    """Every agent as a set-up worker group of `layout.ranks` ranks; returns their proxies."""
    engines = check_group_agents(config, layout.ranks)
    needs = group_needs(options, layout, len(config.agents))  # ConfigError before the cluster
    algorithm = algorithms.make(config.algorithm, **config.algorithm_options)
    connect(options, needs)
    names = [agent.name for agent in config.agents]
    groups = reserve_groups(options, layout, names)
    threads = rank_threads(options, layout.ranks)
    actors = start_actors(options, layout, groups, names, RankWorker, threads)
    flat = {f"{name}/rank{r}": a for name, agents in actors.items() for r, a in enumerate(agents)}
    group = ActorGroup(flat, groups, options.call_timeout_s)
    inits = {n: group.get(n, "start", actors[n][0].rendezvous.remote(), None) for n in names}
    specs: dict[str, dict[str, Any] | None] = {}
    for agent in config.agents:
        specs[agent.name] = None
        if agent.name in engines:
            where = [a.placement.remote() for a in actors[agent.name]]
            placements = group.get(agent.name, "start", where, None)
            try:
                specs[agent.name] = engine_spec(engines[agent.name], agent.options, placements)
            except ValueError as error:
                group.fail_and_raise(agent.name, "start", str(error))
    pending = {
        agent.name: [
            actor.setup.remote(
                inits[agent.name],
                model_reference(agent.model),
                dict(agent.options),
                config.algorithm,
                dict(config.algorithm_options),
                specs[agent.name],
            )
            for actor in actors[agent.name]
        ]
        for agent in config.agents
    }
    infos = {name: group.get(name, "start", refs, None) for name, refs in pending.items()}
    owners = {
        n: [replica["ranks"][0] for replica in specs[n]["replicas"]] if specs[n] else []
        for n in names
    }
    for name in names:
        if owners[name]:
            group.add_closer([actors[name][r] for r in owners[name]])
    return {
        n: GroupPolicy(n, actors[n], group, infos[n], algorithm, engine_owners=owners[n])
        for n in names
    }


class GroupCall(PendingCall):
    """A call in flight on every rank; `result()` merges the ranks' answers. A timed call
    (`GroupPolicy.time_calls`) unpacks each rank's (answer, RankTime) and notes its
    `CallTime` once merged."""

    def __init__(
        self,
        policy: GroupPolicy,
        method: str,
        refs: list[ray.ObjectRef],
        merge: Callable[[list[Any]], Any],
        started: float,
    ) -> None:
        super().__init__(policy, method, refs)
        self.merge, self.started = merge, started
        self.times = policy.call_times

    def result(self) -> Any:
        answers = super().result()
        if self.times is None:
            return self.merge(answers)
        merged = self.merge([answer for answer, _ in answers])
        ranks = tuple(times for _, times in answers)
        self.times.append(CallTime(self.method, self.started, time.perf_counter(), ranks))
        return merged


class GroupPolicy:
    """One agent's worker group behind the Policy protocol (`policies.base`)."""

    def __init__(
        self,
        agent: str,
        ranks: list[Any],
        group: ActorGroup,
        infos: list[Mapping[str, Any]],
        algorithm: Algorithm,
        engine_owners: Sequence[int] = (),
    ) -> None:
        self.agent, self.ranks, self.group = agent, ranks, group
        self.engine_owners = list(engine_owners)  # ranks owning the vLLM engine replicas
        self.name: str = infos[0]["name"]
        self.temperature: float = infos[0]["temperature"]
        self.placement = [dict(info) for info in infos]
        self.generation_batch_size: int = infos[0]["generation_batch_size"]
        self.algorithm = (algorithm.name, algorithm.config)
        self.traffic: TrafficMeter | None = None
        self.call_times: list[CallTime] | None = None  # a list once `time_calls` is on

    def __repr__(self) -> str:
        return f"GroupPolicy({self.agent!r}, ranks={len(self.ranks)})"

    def time_calls(self) -> None:
        """From now on every call runs under the ranks' profiler and its `CallTime` is
        appended to `call_times` (`call_timing`; for benchmarks, off by default)."""
        self.call_times = []

    def _submit(
        self,
        method: str,
        per_rank: list[tuple],
        merge: Callable[[list[Any]], Any],
        started: float | None = None,
    ) -> GroupCall:
        """`method` on the first len(per_rank) ranks, rank r with `per_rank[r]`; `started`
        (perf_counter) is when the caller began preparing it, for `call_times`."""
        started = time.perf_counter() if started is None else started
        if self.group.closed:
            self.group.fail_and_raise(self.agent, method, "the run's actors are already shut down")
        if self.traffic is not None:
            self.traffic.add(method, "sent", per_rank)
        pairs = zip(self.ranks, per_rank, strict=False)
        if self.call_times is None:
            refs = [getattr(a, method).remote(*args) for a, args in pairs]
        else:
            refs = [a.timed.remote(method, *args) for a, args in pairs]
        return GroupCall(self, method, refs, merge, started)

    def _all(self, method: str, *args: Any) -> list[Any]:
        """`method(*args)` on every rank; the ranks' answers."""
        return self._submit(method, [args] * len(self.ranks), list).result()

    # -- the Policy protocol ------------------------------------------------------
    def format_prompt(self, problem: str) -> str:
        return self._submit("format_prompt", [(problem,)], lambda answers: answers[0]).result()

    def generate_async(self, prompts: Sequence[str], n: int, sampling: SamplingParams) -> GroupCall:
        """Prompt blocks of at most `generation_batch_size` rows, block b with seed
        `block_seed(sampling.seed, b)` on rank b % k; `.result()` in prompt order. With vLLM
        engines: the prompts in contiguous chunks, one per engine replica, to its owner rank
        (every rank takes the call: a resync after a level-2 sleep needs them all)."""
        if self.engine_owners:
            return self._engine_generate(prompts, n, sampling)
        world = len(self.ranks)
        blocks = prompt_blocks(len(prompts), max(1, self.generation_batch_size // max(n, 1)))
        work = [
            [(list(prompts[b.start : b.stop]), block_seed(sampling.seed, i)) for i, b in mine]
            for mine in (list(enumerate(blocks))[r::world] for r in range(world))
        ]

        def merge(answers: list[list[list[list[Generation]]]]) -> list[list[Generation]]:
            ordered = [answers[i % world][i // world] for i in range(len(blocks))]
            return [group for block in ordered for group in block]

        return self._submit("generate", [(blocks_, n, sampling) for blocks_ in work], merge)

    def _engine_generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> GroupCall:
        chunks = row_chunks(len(prompts), len(self.engine_owners))
        per_rank: list[tuple] = [([], n, sampling)] * len(self.ranks)
        for owner, chunk in zip(self.engine_owners, chunks, strict=True):
            per_rank[owner] = (list(prompts[chunk.start : chunk.stop]), n, sampling)
        owners = self.engine_owners

        def merge(answers: list[list[list[Generation]]]) -> list[list[Generation]]:
            return [group for owner in owners for group in answers[owner]]

        return self._submit("generate_engine", per_rank, merge)

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        return self.generate_async(prompts, n, sampling).result()

    def score(
        self, prompts: Sequence[str], responses: Sequence[str], finish_reasons: Sequence[str]
    ) -> list[ScoredText]:
        chunks = row_chunks(len(responses), len(self.ranks))
        per_rank = [
            (
                list(prompts[c.start : c.stop]),
                list(responses[c.start : c.stop]),
                list(finish_reasons[c.start : c.stop]),
            )
            for c in chunks
        ]
        return self._submit("score", per_rank, lambda parts: [s for p in parts for s in p]).result()

    def update_async(self, batch: TrainBatch, loss_fn: LossFn) -> GroupCall:
        """Every rank gets the whole batch (one object-store copy) and trains its share."""
        started = time.perf_counter()
        check_loss(self.agent, self.algorithm, loss_fn)
        ref = ray.put(batch)
        per_rank = [(ref,)] * len(self.ranks)
        return self._submit("update", per_rank, lambda answers: answers[0], started)

    def update(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        return self.update_async(batch, loss_fn).result()

    def save(self, path: str | Path) -> None:
        """Save on the ranks' filesystem; the driver must see the result (shared FS)."""
        directory = Path(path).absolute()
        self._all("save", str(directory))
        check_driver_sees(self.group, self.agent, directory, "the ranks")

    def load(self, path: str | Path) -> None:
        self._all("load", str(Path(path).absolute()))

    # -- for tests and benchmarks -------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """The full weights (gathered by rank 0) as numpy arrays."""
        return self._all("state_dict")[0]

    def gradients(self, batch: TrainBatch) -> tuple[float, dict[str, np.ndarray]]:
        """The grad norm and full gradients of `batch`'s first minibatch at the current
        weights, no step taken (`RankWorker.gradients`)."""
        ref = ray.put(batch)
        return self._all("gradients", ref)[0]
