"""One GPU of a worker group (`ray.ranks_per_agent` k > 1) through a step: FSDP2 rank r of the
agent and, when it samples with vLLM, worker r of its tensor-parallel engine (the engine's
workers run one per rank's GPU, so every GPU of the agent holds the same).

The step follows verl's engine lifecycle (issue 37): load (before any engine starts) ->
generate (engine awake) -> the engine sleeps -> score and update with it asleep ->
`torch.cuda.empty_cache()` -> wake `weights` -> bucketed weight sync -> `empty_cache` ->
wake `kv_cache` -> generate. Per phase, on one GPU:

- the trainer's resident shards (weights, AdamW moments, a KL reference) / k; its transients:
  the whole model gathered in bf16 (`fsdp.gathered`, FSDP2's bf16 `param_dtype`, so autocast
  makes no weight copies) to score, or to generate with transformers; per micro-batch terms
  whole; gradients / k and two decoder layers gathered in the update;
- what torch's caching allocator keeps reserved: a freed block stays with the process until
  `empty_cache`, so in the update the process still holds the scoring peak where that is
  larger; `empty_cache` before waking the engine returns everything above the resident
  shards (`returned_by_empty_cache`). Alone on a GPU this never matters (the peak is the
  largest phase either way); beside an engine that wakes into the freed memory it does;
- the engine's share while awake (weights / TP, KV cache, activation workspace) and nothing
  of it while asleep: sleep level 1 moves the weights to host memory, level 2 discards them,
  both drop the KV cache (vLLM docs, "Sleep levels"); without sleep mode all of it stays;
- the weight sync: one staging bucket on each GPU, the engine's clone of it (verl clones a
  bucket before acknowledging it), and one tensor gathered whole in the trainer's dtype;
- a second CUDA context (the engine worker's), NCCL communicators and vLLM's CUDA-graph pool,
  which stay while the engine sleeps (`reserves`). Not counted: a context of vLLM's engine-core
  process (its multiprocess executor runs the model in the workers), and the contexts that
  workers opened on rank 0's GPU when they all read one staging buffer there (issue 37: one
  buffer per GPU now);
- at load: the chosen path (`LOAD_PATH`): each rank's shards and one whole tensor in transit;
  the old path, the whole model in float32 on every GPU before sharding, is reported beside.

The GPU's usable memory is its total less `reserves.RESERVE_BYTES` (the trainer's context and
the allocator's slack), as for one process per GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from algorithms.training.memory_plan.reserves import (
    CUDA_CONTEXT_BYTES,
    CUDA_GRAPH_POOL_BYTES,
    NCCL_COMMUNICATOR_BYTES,
)
from algorithms.training.memory_plan.terms import GIB, PolicyPlan

WAKE_WEIGHTS, SYNC, WAKE_KV = "wake weights", "sync", "wake kv"
LIFECYCLE = ("load", "generate", "score", "update", WAKE_WEIGHTS, SYNC, WAKE_KV)
LOAD_PATH = (
    "each rank reads the weights on the CPU (or the meta device) and shards them there: only "
    "its shards reach its GPU, one whole tensor at a time"
)
SHARDED = ("weights (", "AdamW moments", "grads (", "KL reference weights")
"""`PolicyPlan` terms (by name prefix) FSDP2 divides over the ranks."""
FSDP_PARAM_BYTES = 2
"""FSDP2's `param_dtype` on CUDA (`ray.fsdp.mixed_precision`: bf16 whatever `autocast` says)."""
NOT_ON_RANKS = ("autocast bf16 weight copies",)
"""Terms a rank does not hold: FSDP2 gathers bf16 weights, so autocast casts nothing."""


@dataclass(frozen=True)
class Engine:
    """One GPU's worker of an agent's vLLM engine, as its settings size it."""

    weight_bytes: float  # the model / TP in the engine's dtype
    kv_bytes: float
    workspace_bytes: float  # activations inside the share
    tensor_parallel: int
    sleeps: bool  # sleep mode: asleep outside generate and the sync
    cuda_graphs: bool  # vllm_enforce_eager false
    staging_bytes: float  # one sync bucket (the largest)
    share_knob: str  # the option that sizes the KV cache


@dataclass(frozen=True)
class Row:
    """One term on the GPU: its bytes per phase (absent: 0) and the option that bounds it."""

    name: str
    cells: Mapping[str, float]
    knob: str | None = None


@dataclass(frozen=True)
class GpuPlan:
    """The rows of one GPU per phase, and the figures around them."""

    phases: tuple[str, ...]
    rows: tuple[Row, ...]
    returned_by_empty_cache: float  # freed but reserved bytes `empty_cache` returns
    load_full_copy: float | None  # the load column with the whole float32 model on each
    # GPU before sharding (None: one process, nothing sharded)

    def total(self, phase: str) -> float:
        return sum(row.cells.get(phase, 0.0) for row in self.rows)

    def peak_phase(self) -> str:
        return max(self.phases, key=self.total)


def _each(phases: tuple[str, ...], value: float) -> dict[str, float]:
    return dict.fromkeys(phases, value)


def _trainer_rows(plan: PolicyPlan, ranks: int, generates: bool) -> list[Row]:
    """The rank's own terms: resident shards, the gathered model and each phase's plan terms."""
    arch, c = plan.architecture, FSDP_PARAM_BYTES
    rows = []
    for term in plan.persistent:
        held = ("load", *LIFECYCLE[1:]) if not term.name.startswith("AdamW") else LIFECYCLE[1:]
        rows.append(Row(f"{term.name} / {ranks}", _each(held, term.bytes / ranks)))
    gathered = ("generate", "score") if generates else ("score",)
    rows.append(Row("whole model gathered (bf16)", _each(gathered, arch.params * c)))
    phases = ("generate", "score", "update") if generates else ("score", "update")
    names = dict.fromkeys(t.name for p in phases for t in plan.phases[p])
    for name in (n for n in names if n not in NOT_ON_RANKS):
        cells, knob = {}, None
        for phase in phases:
            for term in plan.phases[phase]:
                if term.name == name:
                    cells[phase] = term.bytes / ranks if name.startswith(SHARDED) else term.bytes
                    knob = knob or term.knob
        rows.append(Row(name + (f" / {ranks}" if name.startswith(SHARDED) else ""), cells, knob))
    rows.append(Row("two layers gathered (bf16)", {"update": 2 * arch.layer_linear_params * c}))
    return rows


def engine_rows(engine: Engine, phases: tuple[str, ...], starts_awake: bool = False) -> list[Row]:
    """The engine worker's share where it is awake and the reserves it keeps while asleep.
    `starts_awake`: the engine is built at load and holds its share then (one process);
    a worker group starts its engines after the load barrier."""
    awake = phases if starts_awake else tuple(p for p in phases if p != "load")
    weights = awake if not engine.sleeps else ("generate", WAKE_WEIGHTS, SYNC, WAKE_KV)
    kv = awake if not engine.sleeps else ("generate", WAKE_KV)
    workspace = awake if not engine.sleeps else ("generate",)
    if engine.sleeps and starts_awake:  # awake from its start until the first generate
        weights, kv, workspace = (("load", *cells) for cells in (weights, kv, workspace))
    rows = [
        Row("vLLM weights / TP", _each(weights, engine.weight_bytes), engine.share_knob),
        Row("vLLM KV cache", _each(kv, engine.kv_bytes), engine.share_knob),
        Row("vLLM activation workspace", _each(workspace, engine.workspace_bytes)),
        Row("CUDA context, vLLM worker", _each(awake, CUDA_CONTEXT_BYTES)),
    ]
    if engine.tensor_parallel > 1:
        rows.append(Row("NCCL, vLLM TP group", _each(awake, NCCL_COMMUNICATOR_BYTES)))
    if engine.cuda_graphs:
        rows.append(Row("CUDA-graph pool (vLLM)", _each(awake, CUDA_GRAPH_POOL_BYTES)))
    return rows


def _bucket_rows(engine: Engine) -> list[Row]:
    """A worker group's sync: one staging bucket and the engine's clone of it."""
    return [
        Row("staging bucket", {SYNC: engine.staging_bytes}, "vllm_sync_bucket_mb"),
        Row("vLLM's clone of a bucket", {SYNC: engine.staging_bytes}, "vllm_sync_bucket_mb"),
    ]


def _weight_bytes(plan: PolicyPlan) -> float:
    """The whole model's weights in the trainer's dtype."""
    return next(t.bytes for t in plan.persistent if t.name.startswith("weights ("))


def _largest_tensor(plan: PolicyPlan) -> float:
    """The largest tensor whole in the trainer's dtype (the embedding, or an MLP matrix)."""
    arch = plan.architecture
    per_param = _weight_bytes(plan) / arch.params
    return per_param * arch.hidden_size * max(arch.vocab_size, arch.intermediate_size)


def rank_gpu_plan(plan: PolicyPlan, ranks: int, engine: Engine | None) -> GpuPlan:
    """One GPU of an agent whose `plan` (one process's) is sharded over `ranks` FSDP2 ranks,
    beside worker r of `engine` (None: it samples with transformers on its ranks)."""
    if engine is None:
        phases = LIFECYCLE[:4]
    elif engine.sleeps:
        phases = LIFECYCLE
    else:  # awake throughout: nothing to wake
        phases = (*LIFECYCLE[:4], SYNC)
    rows = [r for r in _trainer_rows(plan, ranks, engine is None) if set(r.cells) & set(phases)]
    trainer = GpuPlan(phases, tuple(rows), 0.0, 0.0)
    resident = sum(term.bytes for term in plan.persistent) / ranks
    peak = max(trainer.total("score"), trainer.total("update"))
    cached = trainer.total("score") - trainer.total("update")
    if cached > 0:
        rows.append(Row("cached: scoring's peak, freed", {"update": cached}))
    largest = _largest_tensor(plan)
    rows.append(Row("one tensor whole (trainer dtype)", {"load": largest, SYNC: largest}))
    rows.append(Row("NCCL, FSDP2 group", _each(phases, NCCL_COMMUNICATOR_BYTES)))
    if engine is not None:
        rows += engine_rows(engine, phases) + _bucket_rows(engine)
    done = GpuPlan(phases, tuple(rows), 0.0, 0.0)
    full_copy = done.total("load") - largest + _weight_bytes(plan)
    return GpuPlan(phases, tuple(rows), peak - resident, full_copy)


def rank_heading(name: str, gpu: GpuPlan, ranks: int) -> str:
    """The heading of a worker-group agent's table (`format_gpu_plan`)."""
    engine = WAKE_WEIGHTS in gpu.phases or SYNC in gpu.phases
    return f"{name}: each of its {ranks} GPUs (FSDP2 rank r" + (
        ", vLLM worker r)" if engine else ")"
    )


def format_gpu_plan(heading: str, gpu: GpuPlan, usable: float) -> list[str]:
    """The table `graft plan` prints for one agent's GPUs under `heading`: a row per term, a
    column per phase of the lifecycle, in GiB, the verdict against `usable` bytes and the
    figures around it."""
    width = 13
    lines = [
        f"  {heading}",
        f"    {'GiB':<34}" + "".join(f"{phase:>{width}}" for phase in gpu.phases),
    ]
    for row in gpu.rows:
        cells = "".join(
            f"{row.cells[p] / GIB:>{width}.2f}" if row.cells.get(p) else f"{'-':>{width}}"
            for p in gpu.phases
        )
        lines.append(f"    {row.name:<34}{cells}")
    totals = "".join(f"{gpu.total(p) / GIB:>{width}.2f}" for p in gpu.phases)
    lines.append(f"    {'total':<34}{totals}")
    peak = gpu.peak_phase()
    verdict = "fits" if gpu.total(peak) <= usable else "DOES NOT FIT"
    lines.append(
        f"  peak {gpu.total(peak) / GIB:.1f} of {usable / GIB:.1f} GiB usable per GPU, in "
        f"{peak}: {verdict}"
    )
    if WAKE_WEIGHTS in gpu.phases:
        returned = gpu.returned_by_empty_cache
        lines.append(
            f"    (empty_cache before waking returns {returned / GIB:.2f} GiB the update left "
            "reserved; waking weights and KV cache at once without it "
            f"would need {(gpu.total(WAKE_KV) + returned) / GIB:.1f} GiB)"
        )
    if gpu.load_full_copy is not None:
        lines.append(
            f"    (load: {LOAD_PATH}; loading the whole float32 model onto every GPU before "
            f"sharding would peak at {gpu.load_full_copy / GIB:.1f} GiB)"
        )
    return lines
