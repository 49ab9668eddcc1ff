"""Each phase's seconds for one agent on one GPU kind: eager and vLLM rollout (A4, A5),
update (A3, A8), scoring (A3), weight sync (A9), verify and exchange (A10)."""

from __future__ import annotations

import math

from algorithms.training.memory_plan import Architecture, kv_cache_bytes_per_token
from algorithms.training.step_time.anchors import (
    ACTOR_BYTES_PER_S,
    ACTOR_BYTES_PER_TOKEN,
    ADAMW_BYTES_PER_PARAM,
    EXCHANGE_S_PER_ROW,
    LINK_LATENCY_S,
    MEASURED,
    MIB,
    SYNC_CALL_S,
    VERIFY_ITEMS_PER_S,
    VERIFY_WORKERS,
    VLLM_COMPUTE_EFFICIENCY,
    VLLM_STEP_OVERHEAD_S,
    Gpu,
    forward_flops_per_token,
    gather_s,
    hbm_bytes_per_s,
    link_bytes_per_s,
    logits_bytes_per_row,
    train_flops_per_s,
    vllm_kv_bytes_per_token,
)
from algorithms.training.step_time.workload import Agent, LengthMix, StepWorkload


def eager_rollout_s(agent: Agent, gpu: Gpu, work: StepWorkload, measured=MEASURED) -> float:
    """A4: blocks of `generation_batch_size` rows, dealt over the agent's ranks."""
    arch, mix = agent.arch, work.mix
    rows = min(agent.options.generation_batch_size, work.rows)
    blocks = math.ceil(work.rows / rows)
    per_rank = math.ceil(blocks / agent.gpus)
    bandwidth = hbm_bytes_per_s(gpu)
    fixed = arch.num_layers * measured.layer_overhead_s + 2 * arch.linear_params / bandwidth
    kv = kv_cache_bytes_per_token(arch, agent.options)
    live = sum(
        q * ((mix.prompt_tokens + s) * kv + logits_bytes_per_row(arch))
        for s, q in enumerate(mix.survivals)
    )
    prefill = rows * mix.prompt_tokens * forward_flops_per_token(arch, mix.prompt_tokens / 2)
    block = (
        mix.block_steps(rows) * fixed
        + rows * live / bandwidth
        + prefill / train_flops_per_s(gpu, measured)
    )
    return per_rank * block + gather_s(2 * arch.params, agent.gpus, gpu)


def vllm_peak_kv_tokens(work: StepWorkload, slots: int | None = None) -> float:
    """The largest expected number of live tokens over the decode with `slots` decode slots
    (None: every row at once) (A5)."""
    mix = work.mix
    last = work.rows if slots is None else min(slots, work.rows)
    peak = last * max(q * (mix.prompt_tokens + s) for s, q in enumerate(mix.survivals))
    if last < work.rows:
        peak = max(peak, last * mix.decode_position)
    return peak


def _vllm_decode_step_s(agent: Agent, gpu: Gpu, live: float, kv_tokens: float) -> float:
    """A5: one decode step of `live` rows holding `kv_tokens` tokens of KV between them."""
    arch, tp = agent.arch, agent.gpus
    compute = tp * gpu.bf16_tflops * 1e12 * VLLM_COMPUTE_EFFICIENCY
    attention = 4 * arch.num_layers * arch.num_heads * arch.head_dim * kv_tokens
    flops = live * 2 * arch.linear_params + attention
    read = (
        2 * arch.params / tp
        + kv_tokens * vllm_kv_bytes_per_token(arch, tp)
        + live * 3 * 4 * arch.vocab_size
    )
    step = max(flops / compute, read / hbm_bytes_per_s(gpu)) + VLLM_STEP_OVERHEAD_S
    if tp > 1:
        message = live * arch.hidden_size * 2
        step += 2 * arch.num_layers * (LINK_LATENCY_S + message / link_bytes_per_s(gpu))
    return step


def vllm_rollout_s(
    agent: Agent, gpu: Gpu, work: StepWorkload, kv_available: float | None = None
) -> float:
    """A5: one engine over the agent's GPUs at TP = gpus, continuous batching over its
    `max_num_seqs` slots; `kv_available`: KV-cache bytes per GPU (None: enough)."""
    arch, mix = agent.arch, work.mix
    last = min(agent.max_num_seqs, work.rows)
    total = 0.0
    if work.rows > last:  # every slot busy until the queue's last rows are in
        busy_steps = (work.rows - last) * mix.mean_response / last
        step = _vllm_decode_step_s(agent, gpu, last, last * mix.decode_position)
        total += busy_steps * step
    for s, q in enumerate(mix.survivals):
        live = last * q
        if live <= 0:
            continue
        step = _vllm_decode_step_s(agent, gpu, live, live * (mix.prompt_tokens + s))
        total += (1 - (1 - q) ** last) * step if q < 1 else step
    if kv_available is not None:
        needed = vllm_peak_kv_tokens(work, agent.max_num_seqs)
        needed *= vllm_kv_bytes_per_token(arch, agent.gpus)
        total *= max(1.0, needed / max(kv_available, 1.0))
    compute = agent.gpus * gpu.bf16_tflops * 1e12 * VLLM_COMPUTE_EFFICIENCY
    prefill = (
        work.prompts * mix.prompt_tokens * forward_flops_per_token(arch, mix.prompt_tokens / 2)
    )
    return total + prefill / compute


def _step_flops(arch: Architecture, tokens: float, mix: LengthMix, passes: int) -> float:
    return tokens * passes * forward_flops_per_token(arch, mix.mean_position)


def update_micro_batches(agent: Agent, work: StepWorkload) -> int:
    """Micro-batches per minibatch (a multiple of the ranks in a group)."""
    tokens = work.rows / work.num_minibatches * work.mix.mean_row * work.padding
    budget = agent.options.max_tokens_per_micro_batch
    if budget is None:
        rows = agent.options.micro_batch_size or work.rows // work.num_minibatches
        count = math.ceil(work.rows / work.num_minibatches / rows)
    else:
        count = math.ceil(tokens / budget)
    return math.ceil(count / agent.gpus) * agent.gpus


def update_s(agent: Agent, gpu: Gpu, work: StepWorkload, measured=MEASURED) -> float:
    """A3 + A8: the update's FLOPs at the measured rate over the agent's GPUs, FSDP's
    collectives and AdamW."""
    arch, options = agent.arch, agent.options
    micro = update_micro_batches(agent, work)
    two_pass = agent.group or micro > 1
    passes = (4 if options.gradient_checkpointing else 3) + (1 if two_pass else 0)
    tokens = work.rows * work.mix.mean_row * work.padding
    rate = agent.gpus * train_flops_per_s(gpu, measured)
    compute = _step_flops(arch, tokens, work.mix, passes) / rate
    per_rank = micro // agent.gpus * work.num_minibatches
    collectives = per_rank * (
        3 * gather_s(2 * arch.params, agent.gpus, gpu) + gather_s(4 * arch.params, agent.gpus, gpu)
    )
    adamw = work.num_minibatches * ADAMW_BYTES_PER_PARAM * arch.params / agent.gpus
    return compute + collectives + adamw / hbm_bytes_per_s(gpu)


def scoring_s(agent: Agent, gpu: Gpu, work: StepWorkload, measured=MEASURED) -> float:
    """A3: the receiver's forward over its peer rows, split over its ranks."""
    tokens = work.peer_rows * work.mix.mean_row * work.padding
    flops = _step_flops(agent.arch, tokens, work.mix, 1)
    gathered = gather_s(2 * agent.arch.params, agent.gpus, gpu)
    return flops / (agent.gpus * train_flops_per_s(gpu, measured)) + gathered


def weight_sync_s(agent: Agent, gpu: Gpu) -> float:
    """A9: float32 shards gathered and cast into each GPU's bf16 staging bucket, the engine
    worker's clone of it, its shard written into the engine; asleep at level 2 between syncs
    (nothing crosses to the host)."""
    weights = 2 * agent.arch.params  # the engine's bf16
    shard = weights / agent.gpus
    buckets = math.ceil(weights / (agent.sync_bucket_mb * MIB))
    return (
        gather_s(4 * agent.arch.params, agent.gpus, gpu)
        + (3 * weights + 2 * shard) / hbm_bytes_per_s(gpu)
        + buckets * SYNC_CALL_S
    )


def verify_s(agents: int, work: StepWorkload) -> float:
    return agents * work.rows / (VERIFY_ITEMS_PER_S * VERIFY_WORKERS)


def exchange_s(agents: int, work: StepWorkload) -> float:
    rows = agents * work.rows
    traffic = 3 * rows * work.mix.mean_response * ACTOR_BYTES_PER_TOKEN / ACTOR_BYTES_PER_S
    return rows * EXCHANGE_S_PER_ROW + traffic
