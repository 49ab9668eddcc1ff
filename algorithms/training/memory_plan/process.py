"""The GPU of a one-process vLLM agent through a step: `graft_env.policies.vllm_policy.VLLMPolicy`
(the local backend, or one Ray actor per agent), a transformers trainer and, in a process of
its own on the same GPU, its vLLM engine (TP = 1 unless `vllm_tensor_parallel_size` says more).

The same per-phase lifecycle as a worker group's GPU (`lifecycle`, `engine.cycle.EngineCycle`)
with one rank: generate (engine awake) -> sleep, level 1 (`vllm_policy.SLEEP_LEVEL`: the sync
sends only the blocks that changed, so the rest must survive the sleep; level 1 moves the
weights to host memory, so nothing of the share stays on the GPU either way) -> score and
update with it asleep -> `empty_cache` -> wake `weights` -> sync -> `empty_cache` -> wake
`kv_cache`. Per phase:

- the trainer's whole state (no FSDP): weights, AdamW moments (from the first update on), a KL
  reference; its transients as one process's plan has them (`terms`: autocast's bf16 weight
  copies, the micro-batch's KV cache, activations and logits, the gradients); it never
  generates (the engine does); what the caching allocator keeps through the update, as for a
  rank (`lifecycle`);
- the staging buffer (`engine.staging.WeightStager`): laid out once for the whole state dict
  (tied tensors once) in the engine's dtype, on the trainer's GPU, and kept (the engine maps it
  once) from the first sync on: the whole model in bf16, in every phase after load. Slot
  alignment adds under 64 bytes per tensor (not counted). The engine loads views of it (no
  clone: the buffer is not refilled before the load returns), and the trainer's state-dict
  tensors are its parameters, cast on the copy into the buffer (no whole tensor in transit);
- the engine's share where it is awake: at load too (it is built awake right after the trainer
  loads, and sleeps after its first generate), its CUDA context from load on, the CUDA-graph
  pool (`vllm_enforce_eager: false`), no NCCL with TP = 1 (`lifecycle.engine_rows`);
- other policies on the same device (the local backend may put several on one GPU): their own
  peak, held in every phase, an upper bound (they run one after another in one process,
  whose allocator can reuse their cached blocks).
"""

from __future__ import annotations

from algorithms.training.memory_plan.lifecycle import (
    LIFECYCLE,
    SYNC,
    Engine,
    GpuPlan,
    Row,
    engine_rows,
)
from algorithms.training.memory_plan.terms import PolicyPlan

STAGER_ROW = "staging buffer, whole model"


def _trainer_rows(plan: PolicyPlan, phases: tuple[str, ...]) -> list[Row]:
    """The trainer's resident terms, then each scoring and update term of its plan."""
    rows = []
    for term in plan.persistent:
        held = phases[1:] if term.name.startswith("AdamW") else phases
        rows.append(Row(term.name, dict.fromkeys(held, term.bytes)))
    names = dict.fromkeys(t.name for p in ("score", "update") for t in plan.phases[p])
    for name in names:
        terms = {p: t for p in ("score", "update") for t in plan.phases[p] if t.name == name}
        knob = next(t.knob for t in terms.values())
        rows.append(Row(name, {p: t.bytes for p, t in terms.items()}, knob))
    return rows


def process_gpu_plan(plan: PolicyPlan, engine: Engine, beside: float = 0.0) -> GpuPlan:
    """The GPU of a one-process agent whose trainer's `plan` is one process's, beside its vLLM
    `engine` (`Engine.weight_bytes` x TP is the whole model in the engine's dtype: the staging
    buffer's size) and `beside` bytes of other policies on the device."""
    phases = LIFECYCLE if engine.sleeps else (*LIFECYCLE[:4], SYNC)
    rows = _trainer_rows(plan, phases)
    score, update = plan.transient("score"), plan.transient("update")
    if score > update:
        rows.append(Row("cached: scoring's peak, freed", {"update": score - update}))
    stager = engine.weight_bytes * engine.tensor_parallel
    rows.append(Row(STAGER_ROW, dict.fromkeys(phases[1:], stager)))
    rows += engine_rows(engine, phases, starts_awake=True)
    if beside:
        rows.append(Row("other policies on the device (peak)", dict.fromkeys(phases, beside)))
    return GpuPlan(phases, tuple(rows), max(score, update), None)


def process_heading(name: str, device: str, engine: Engine) -> str:
    """The heading of a one-process vLLM agent's table (`lifecycle.format_gpu_plan`)."""
    sleep = "sleeps at level 1" if engine.sleeps else "sleep mode off"
    return (
        f"{name}: {device}, the trainer process and its vLLM engine (TP "
        f"{engine.tensor_parallel}, {sleep}) through the engine lifecycle"
    )
