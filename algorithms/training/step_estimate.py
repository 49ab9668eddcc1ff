"""The time of one training step on GPUs, per phase, estimated from the configs and from this
project's own H200 measurements (pure arithmetic: no torch, no weights).

What it answers: how long one step of a run config takes on a node of GPUs (each agent on k
GPUs), phase by phase (rollout, verify, scoring, update, weight sync, exchange), and how that
compares with the paper stack's ~2.5-4 min per step (issue 28's estimate for verl on 4 x H200).
Nothing here has been checked against a GPU run of the paper configs: no such run exists.

Assumptions A1-A11 were written down before any number was computed (ca88099); the estimate
is what comes out of them. They have been amended since, each amendment recorded below with
the figures it moved (pair 1 = configs/paper_smollm3_qwen3_1node.yaml, `graft plan ...
--gpus 4`, 4 x H200 / 4 x H100-80GB):

- 8ec41df, after seeing the output: A11 had every backend's agents run rollout, update and
  sync at once; the local backend (every policy in the driver) runs them one after the
  other. Moved: the local-backend figures only (paper_smollm3_qwen3.yaml on 4 x H200: 65 min
  eager / 10.4 min vLLM per step, shown before as the slower agent's). Pair 1's worker-group
  figures did not move (Ray backend: agents at once, as before).
- After the review of ca88099-341e35c (its findings 4, 5, 6, 8), numbers as above:
  A3: the measured update's positions count every row's prompt (128 x (128 + 8.3)), not
  one prompt per group: 116 -> 122 TFLOP/s (11.7 -> 12.4 % MFU); update 159.1 -> 150.7 s
  (SmolLM3), 91.3 -> 86.5 s (Qwen3), scoring 6.2 -> 5.9 s.
  A5: the KV space is the engine's preallocated `vllm_gpu_memory_utilization` share (or
  `vllm_kv_cache_gib`), not the GPU's leftover: KV free 117.0 / 125.8 -> 65.6 / 66.9 GiB
  (H200), 56.0 / 64.8 -> 35.1 / 36.4 GiB (H100); memory per GPU while sampling 44.4 /
  48.0 GiB on either GPU -> 87.7 / 80.1 GiB (H200), 57.2 / 49.6 GiB (H100). Pair 1
  needs at most 15.4 / 24.0 GiB of KV per GPU: no stretch. paper_smollm3_qwen3.yaml (local
  backend, samples with transformers) keeps the default 1 GiB `vllm_kv_cache_gib`, so its
  vLLM alternative now stretches: 10.4 -> 93 min per step on 4 x H200.
  A5: continuous batching over `vllm_max_num_seqs` = 256 slots (was: every row at once):
  vLLM rollout 32.3 / 38.3 -> 40.7 / 45.7 s (H200), 40.7 / 50.1 -> 50.3 / 58.0 s (H100).
  A9: the gather moves float32 (4 x params), buckets of `vllm_sync_bucket_mb` (512 MiB):
  sync 0.29 / 0.16 -> 0.33 / 0.19 s.
  Pair 1 with vLLM: 205 -> 204 s (H200), 217 -> 216 s (H100); eager 1117 -> 1108 s,
  1153 -> 1144 s. Still within the target.

A1. Workload (the paper's step, GRAFT-SPEC §11): every agent samples `prompts` x n = 128 x 8
    responses; a prompt is 140 tokens; responses follow the length mix the project already
    uses for padding (tests/graft_env/policies/test_micro_batches.py `paper_mix`): 15 % cut at
    the cap (4,096), the rest log-normal with median 160 and sigma 0.8 (mean ~800 in all).
    One optimisation epoch of `num_minibatches` = 4 minibatches. Each receiver scores the
    groups of `peer_prompts` = 16 transferred prompts per step (16 x 8 = 128 rows, same length
    mix; not measured for the paper's pair: 12.5 % of the prompts, a guess on the high side).
A2. Token-budget micro-batches pad to 1.15 x the real tokens (the upper end measured on the
    mix at a budget of 16,384: 1.09-1.15, README "Running the paper's configs on GPUs").
A3. Training throughput (update and scoring forwards) is the FLOP rate measured on the H200:
    the 740M-parameter Llama of docs/results/gpu_check_h200/device_check_lr1e-6.json, mixed
    precision, gradient checkpointing: one update of 128 rows padded to 128 positions in
    0.849 s (`mixed.models.scale-llama.gradient_checkpointing.update_s`; every row carries
    its ~8-token prompt), one micro-batch, so 4 forward-equivalents (forward, recomputation,
    backward = 2) -> 122 TFLOP/s, 12.4 % of the H200's 989 dense bf16 TFLOP/s. A larger
    model is charged its FLOPs at that rate (FLOPs = 2 x linear parameters per token and
    forward-equivalent, plus causal attention 4 x layers x query width x position); another
    GPU's rate is scaled by its peak bf16 FLOP/s. An update runs 5 forward-equivalents per
    token with checkpointing (the no-grad log-prob pass, the forward, the recomputation,
    backward = 2), 4 without; the local backend skips the no-grad pass when a minibatch is
    one micro-batch. Scoring is 1 forward-equivalent.
A4. Eager transformers rollout (`HFPolicy.generate`, our KV-cache loop): the measured decode
    step of the same 740M model, `mixed.models.scale-llama.sampling.generate_s` = 3.150 s for
    16 x 8 rows in 2 blocks of 64 rows x 128 steps = 256 steps -> 12.3 ms per step. Of that,
    reading its bf16 weights and KV cache at A6's bandwidth takes 0.6 ms; the rest is charged
    to per-layer launch overhead (0.73 ms per layer per step) and does not depend on the GPU,
    the rows or the width. A target model's step: its layers x that overhead, plus its bf16
    weights, its live rows' KV cache (`memory_plan.kv_cache_bytes_per_token`) and log-prob
    logits (4 float32 copies per row) read at A6's bandwidth. Rows are decoded in blocks of
    `generation_batch_size`; a block runs until its longest row ends and finished rows leave
    it; a worker group deals the blocks over its ranks.
A5. vLLM rollout (never run on a GPU by this project; no measured number exists): one engine
    per agent at tensor parallelism TP = the agent's GPUs, prefix caching (each prompt
    prefilled once), continuous batching over `vllm_max_num_seqs` = S slots (default 256):
    with rows R <= S every row is decoded at once; with R > S the first R - S rows' tokens
    are decoded with all S slots busy ((R - S) x mean response / S steps, at the mean
    position of a decoded token), then the last S rows as if they started together (until
    the longest ends). A decode step is the larger of its FLOPs at 50 % of the GPUs' peak
    and its bytes (bf16 weights / TP, the live rows' bf16 KV cache / TP, the sampled rows'
    float32 logits 3 times) at A6's bandwidth, plus 2 ms of scheduler / sampler / launch
    overhead per step and, at TP > 1, two all-reduces of [rows, hidden] bf16 per layer at
    A7's link (10 us latency each). The KV cache needed is the largest expected number of
    live tokens (S rows at that mean position while all slots are busy, else the peak of
    the last S rows). The KV space is what the engine preallocates whatever the live rows:
    `vllm_kv_cache_gib` when set, else `vllm_gpu_memory_utilization` x the GPU's memory less
    the engine's weights / TP (`ray.engine_settings`) and 2 GiB of engine workspace (its
    activations come out of the same share); when the KV needed does not fit it, decode
    time grows by the ratio needed / available (preemption). On one GPU the engine holds
    that share (or its weights, the fixed KV and the workspace) beside the trainer's
    resident state.
A6. HBM bandwidth achieved: 70 % of the GPU's peak (H200 4.8 TB/s, H100 3.35, A100 2.04).
A7. GPU-to-GPU links inside a node: 70 % of NVLink's per-direction bandwidth (H100/H200
    450 GB/s, A100 300 GB/s); host copies over PCIe at 25 GB/s.
A8. FSDP2 over k GPUs (worker groups): per micro-batch and rank, 3 all-gathers of the bf16
    weights (no-grad pass, forward, backward) and one reduce-scatter of float32 gradients,
    each moving (k-1)/k of its bytes over A7's link, not overlapped with compute (an upper
    bound: FSDP2 prefetches). AdamW reads and writes 28 bytes per parameter shard per step at
    A6's bandwidth. Generation and scoring unshard the whole model once per call.
A9. Weight sync (vLLM only): the FSDP shards all-gathered in the trainer's float32 (4 bytes
    per parameter: `DTensor.full_tensor()` of the master weights, cast to the engine's bf16
    afterwards, `ray.weight_sync`) over A7's link, written into the engine (read + write of
    its bf16 shard, A6), in buckets of `vllm_sync_bucket_mb` (default 512 MiB) of bf16 at
    5 ms of call overhead each; sleep mode level 1 moves the engine's bf16 weights to host
    memory and back (A7's PCIe) every step.
A10. Verify: the reward on the driver at 221 items/s per worker process (measured on this
    project's CPU machine: `python -m benchmarks.perf.verifier_throughput --items 500`,
    single process, MATH500 answers) with 8 workers. Exchange (driver): the GRAFT step's
    measured exchange phase, 0.002 s for 2 x 128 rows (docs/results/gpu_check_h200/
    step_time.log), scaled by rows, plus each row's ids and log-probs (8 bytes per token)
    crossing to and from the actors three times at 1 GB/s.
A11. Under the Ray backend agents run rollout, update and weight sync at the same time on
    their own GPUs (the loop starts every agent's call before waiting: the step takes the
    slowest agent); with every policy in the driver (the local backend) one after the other.
    Verify, scoring (one receiver after the other) and the exchange always run in turn. Not counted:
    checkpoints (every 10 steps), evaluation, start-up, model loading.

The target (issue 28): within 1.5 x the paper stack's estimate, i.e. at most 1.5 x 4 min =
6 min per step (`TARGET_S`); the ratio to the lower end (2.5 min) is reported beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from algorithms.training.memory_plan import (
    GIB,
    Architecture,
    PolicyPlan,
    kv_cache_bytes_per_token,
)
from algorithms.training.ray.engine_settings import (
    EngineSettings,
    kv_bytes_per_token,
    rank_update_peak,
)
from graft_env.policies.options import HFPolicyOptions, VLLMEngineOptions

PAPER_STACK_S = (150.0, 240.0)
"""The paper stack's step (verl, 4 x H200, FSDP + vLLM at TP=2): ~2.5-4 min (issue 28)."""
TARGET_FACTOR = 1.5
TARGET_S = TARGET_FACTOR * PAPER_STACK_S[1]


@dataclass(frozen=True)
class Gpu:
    """A GPU's published peaks (dense bf16 tensor FLOP/s, HBM and NVLink per direction)."""

    name: str
    memory_gib: float
    bf16_tflops: float
    hbm_tb_s: float
    nvlink_gb_s: float
    pcie_gb_s: float = 25.0


GPUS = {
    "h200": Gpu("h200", 141.0, 989.0, 4.8, 450.0),
    "h100-80gb": Gpu("h100-80gb", 80.0, 989.0, 3.35, 450.0),
    "a100-80gb": Gpu("a100-80gb", 80.0, 312.0, 2.04, 300.0),
}
MEASURED_GPU = GPUS["h200"]
HBM_EFFICIENCY = 0.7  # A6
LINK_EFFICIENCY = 0.7  # A7
LINK_LATENCY_S = 10e-6  # A5
VLLM_COMPUTE_EFFICIENCY = 0.5  # A5
VLLM_STEP_OVERHEAD_S = 2e-3  # A5
VLLM_WORKSPACE_BYTES = 2 * GIB  # A5
ENGINE_DEFAULTS = VLLMEngineOptions()
MIB = 2**20
SYNC_CALL_S = 5e-3  # A9
ADAMW_BYTES_PER_PARAM = 28  # A8: read p, g, m, v (fp32), write p, m, v
VERIFY_ITEMS_PER_S = 221.4  # A10, verifier_throughput, single process
VERIFY_WORKERS = 8  # A10
EXCHANGE_S_PER_ROW = 0.002 / 256  # A10, step_time.log: graft exchange 0.002 s, 2 x 16 x 8 rows
ACTOR_BYTES_PER_S = 1e9  # A10
ACTOR_BYTES_PER_TOKEN = 8  # A10: int32 id + float32 log-prob


@dataclass(frozen=True)
class LengthMix:
    """Response lengths (A1): `cut_share` at the cap, the rest log-normal, capped."""

    prompt_tokens: int = 140
    cap: int = 4096
    cut_share: float = 0.15
    median: float = 160.0
    sigma: float = 0.8

    def survival(self, s: int) -> float:
        """P(response length > s), s >= 0."""
        if s >= self.cap:
            return 0.0
        if s <= 0:
            return 1.0
        z = (math.log(s) - math.log(self.median)) / self.sigma
        return self.cut_share + (1 - self.cut_share) * 0.5 * math.erfc(z / math.sqrt(2))

    @cached_property
    def survivals(self) -> tuple[float, ...]:
        return tuple(self.survival(s) for s in range(self.cap))

    @property
    def mean_response(self) -> float:
        return sum(self.survivals)

    @property
    def mean_row(self) -> float:
        return self.prompt_tokens + self.mean_response

    @property
    def mean_position(self) -> float:
        """The token-weighted mean position in a row (prompt + response): E[T^2] / 2E[T]."""
        p = self.prompt_tokens
        # E[T^2] = p^2 + 2p E[L] + E[L^2], E[L^2] = sum_s (2s + 1) P(L > s)
        second = sum((2 * s + 1) * q for s, q in enumerate(self.survivals))
        return (p * p + 2 * p * self.mean_response + second) / (2 * self.mean_row)

    @property
    def decode_position(self) -> float:
        """The mean position of a decoded token (its row's KV length then): sum_s P(L > s)
        (p + s) / E[L], the mean context a busy decode slot holds (A5)."""
        p = self.prompt_tokens
        return sum(q * (p + s) for s, q in enumerate(self.survivals)) / self.mean_response

    def block_steps(self, rows: int) -> float:
        """Expected decode steps of a block of `rows` rows (until its longest row ends)."""
        return sum(1 - (1 - q) ** rows for q in self.survivals)


@dataclass(frozen=True)
class StepWorkload:
    """One step of one agent (A1, A2)."""

    prompts: int = 128
    n: int = 8
    num_minibatches: int = 4
    peer_prompts: int = 16
    padding: float = 1.15
    mix: LengthMix = field(default_factory=LengthMix)

    @property
    def rows(self) -> int:
        return self.prompts * self.n

    @property
    def peer_rows(self) -> int:
        return min(self.peer_prompts, self.prompts) * self.n


MEASURED_ARCH = Architecture(
    model_type="llama",
    vocab_size=373,
    hidden_size=2048,
    intermediate_size=2048 * 8 // 3,
    num_layers=16,
    num_heads=16,
    num_kv_heads=8,
    head_dim=128,
    tied=False,
    rope_layers=16,
)
"""The model the H200 measurements ran on: `benchmarks.perf.device_check`'s scale-llama
(hidden 2048, 16 layers, tiny-a's 373-token vocabulary; 739,760,128 parameters)."""


@dataclass(frozen=True)
class Measured:
    """The H200 figures the estimate is derived from (docs/results/gpu_check_h200,
    device_check_lr1e-6.json, precision "mixed", model scale-llama)."""

    update_s: float = 0.8492554850000147  # gradient_checkpointing.update_s
    update_rows: int = 128
    update_width: int = 128  # every row padded to the cap of 128 new tokens
    prompts: int = 16
    prompt_tokens: float = 8.3  # PROBLEMS[:16] in tiny-a's template: 6-9 tokens
    update_forward_equivalents: int = 4  # one micro-batch, checkpointing: fwd, recompute, bwd 2
    generate_s: float = 3.1500218959999984  # sampling.generate_s
    decode_steps: int = 256  # 2 blocks of 64 rows x 128 steps
    decode_rows: int = 64

    @property
    def update_flops(self) -> float:
        positions = self.update_rows * (self.update_width + self.prompt_tokens)  # each row's prompt
        mean_position = self.prompt_tokens + self.update_width / 2
        per = forward_flops_per_token(MEASURED_ARCH, mean_position)
        return positions * self.update_forward_equivalents * per

    @property
    def flops_per_s(self) -> float:
        """The training FLOP rate on the H200 (A3)."""
        return self.update_flops / self.update_s

    @property
    def layer_overhead_s(self) -> float:
        """Eager decoding's per-layer, per-step time beyond reading memory (A4)."""
        step = self.generate_s / self.decode_steps
        kv = kv_cache_bytes_per_token(MEASURED_ARCH, HFPolicyOptions(autocast="bfloat16"))
        context = self.prompt_tokens + 64  # mean position over 128 steps
        read = 2 * MEASURED_ARCH.linear_params + self.decode_rows * (
            context * kv + logits_bytes_per_row(MEASURED_ARCH)
        )
        return (step - read / hbm_bytes_per_s(MEASURED_GPU)) / MEASURED_ARCH.num_layers


MEASURED = Measured()


def forward_flops_per_token(arch: Architecture, position: float) -> float:
    """One forward's FLOPs for a token at `position`: its linear layers and causal attention."""
    return 2 * arch.linear_params + 4 * arch.num_layers * arch.num_heads * arch.head_dim * position


def logits_bytes_per_row(arch: Architecture) -> float:
    """Eager sampling's float32 logits per row and step (4 copies: logits, log-softmax...)."""
    return 4 * 4 * arch.vocab_size


def hbm_bytes_per_s(gpu: Gpu) -> float:
    return gpu.hbm_tb_s * 1e12 * HBM_EFFICIENCY


def link_bytes_per_s(gpu: Gpu) -> float:
    return gpu.nvlink_gb_s * 1e9 * LINK_EFFICIENCY


def train_flops_per_s(gpu: Gpu, measured: Measured = MEASURED) -> float:
    """A3: the measured rate, scaled by the GPU's peak."""
    return measured.flops_per_s * gpu.bf16_tflops / MEASURED_GPU.bf16_tflops


def vllm_kv_bytes_per_token(arch: Architecture, tp: int = 1) -> float:
    """bf16 keys and values of every layer on one of `tp` GPUs (vLLM's cache; the KV heads
    split over tp, `ray.engine_settings.kv_bytes_per_token`)."""
    return kv_bytes_per_token(arch, 2, tp)


def gather_s(param_bytes: float, gpus: int, gpu: Gpu) -> float:
    """An all-gather (or reduce-scatter) of `param_bytes` over `gpus` GPUs (A7)."""
    return 0.0 if gpus <= 1 else param_bytes * (gpus - 1) / gpus / link_bytes_per_s(gpu)


@dataclass(frozen=True)
class Agent:
    """One agent as the estimate sees it: its model, options and GPUs."""

    name: str
    arch: Architecture
    options: HFPolicyOptions
    gpus: int = 1
    group: bool = False  # a worker group (FSDP2 over `gpus` ranks): always two-pass updates
    rollout_backend: str = "transformers"
    max_num_seqs: int = ENGINE_DEFAULTS.max_num_seqs  # vllm_max_num_seqs: decode slots (A5)
    sync_bucket_mb: float = ENGINE_DEFAULTS.sync_bucket_mb  # vllm_sync_bucket_mb (A9)


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
    compute = _step_flops(arch, tokens, work.mix, passes) / (agent.gpus * train_flops_per_s(gpu))
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
    """A9: float32 shards gathered, cast and written into the engine in bf16 buckets, sleep
    and wake."""
    weights = 2 * agent.arch.params  # the engine's bf16
    shard = weights / agent.gpus
    buckets = math.ceil(weights / (agent.sync_bucket_mb * MIB))
    return (
        gather_s(4 * agent.arch.params, agent.gpus, gpu)
        + 2 * shard / hbm_bytes_per_s(gpu)
        + buckets * SYNC_CALL_S
        + 2 * shard / (gpu.pcie_gb_s * 1e9)
    )


def verify_s(agents: int, work: StepWorkload) -> float:
    return agents * work.rows / (VERIFY_ITEMS_PER_S * VERIFY_WORKERS)


def exchange_s(agents: int, work: StepWorkload) -> float:
    rows = agents * work.rows
    traffic = 3 * rows * work.mix.mean_response * ACTOR_BYTES_PER_TOKEN / ACTOR_BYTES_PER_S
    return rows * EXCHANGE_S_PER_ROW + traffic


@dataclass(frozen=True)
class Phase:
    """One phase: each agent's seconds, the step's (max when agents run at once, else sum)."""

    name: str
    per_agent: tuple[float, ...]
    concurrent: bool
    source: str

    @property
    def seconds(self) -> float:
        if not self.per_agent:
            return 0.0
        return max(self.per_agent) if self.concurrent else sum(self.per_agent)


@dataclass(frozen=True)
class StepEstimate:
    """A step's phases with the agents' own rollout backends (`phases`, which sum to
    `total`), and the rollout and weight sync of either backend (`alternatives`)."""

    gpu: Gpu
    agents: tuple[Agent, ...]
    phases: tuple[Phase, ...]
    alternatives: dict[str, Phase]

    @property
    def total(self) -> float:
        return sum(phase.seconds for phase in self.phases)

    def total_with(self, backend: str) -> float:
        """The step if every agent rolled out with `backend` ("vllm" or "transformers")."""
        if backend not in ROLLOUT_ROWS:
            raise ValueError(f"rollout backend {backend!r}: not one of {sorted(ROLLOUT_ROWS)}")
        rollout = self.alternatives[ROLLOUT_ROWS[backend]].seconds
        sync = self.alternatives[SYNC_ROW].seconds if backend == "vllm" else 0.0
        rest = sum(p.seconds for p in self.phases if p.name not in ("rollout", "weight sync"))
        return rollout + sync + rest

    def meets_target(self, seconds: float | None = None) -> bool:
        return (self.total if seconds is None else seconds) <= TARGET_S


ROLLOUT_ROWS = {"transformers": "rollout, eager transformers", "vllm": "rollout, vLLM (TP=GPUs)"}
SYNC_ROW = "weight sync, with vLLM"


def _own(
    name: str, agents: Sequence[Agent], by_backend: dict[str, Phase], source: str, together: bool
) -> Phase:
    """Each agent's figure from the phase of its own rollout backend (0 where none)."""
    values = tuple(
        by_backend[a.rollout_backend].per_agent[i] if a.rollout_backend in by_backend else 0.0
        for i, a in enumerate(agents)
    )
    return Phase(name, values, together, source)


def estimate_step(
    agents: Sequence[Agent],
    gpu: Gpu,
    work: StepWorkload | None = None,
    kv_available: Sequence[float | None] | None = None,
    measured: Measured = MEASURED,
    together: bool = True,
) -> StepEstimate:
    """Every phase of one step of `agents` on `gpu`s (each agent on its own `gpus`);
    `kv_available[i]`: KV-cache bytes per GPU agent i's vLLM engine has (None: enough).
    `together`: the agents run in processes of their own (the Ray backend, A11), so
    rollout, update and weight sync take the slowest agent; else (every policy in the
    driver, the local backend) one after the other."""
    work = work or StepWorkload()
    kv = list(kv_available) if kv_available is not None else [None] * len(agents)
    eager = Phase(
        ROLLOUT_ROWS["transformers"],
        tuple(eager_rollout_s(a, gpu, work, measured) for a in agents),
        together,
        "A4: measured H200 decode step",
    )
    vllm = Phase(
        ROLLOUT_ROWS["vllm"],
        tuple(vllm_rollout_s(a, gpu, work, k) for a, k in zip(agents, kv, strict=True)),
        together,
        "A5: not measured (vLLM never ran here)",
    )
    sync = Phase(SYNC_ROW, tuple(weight_sync_s(a, gpu) for a in agents), together, "A9")
    backends = {"transformers": eager, "vllm": vllm}
    phases = (
        _own("rollout", agents, backends, "each agent's rollout_backend", together),
        Phase("verify", (verify_s(len(agents), work),), False, "A10: measured items/s (CPU)"),
        Phase(
            "scoring",
            tuple(scoring_s(a, gpu, work, measured) for a in agents),
            False,
            "A3: measured H200 FLOP rate",
        ),
        Phase(
            "update",
            tuple(update_s(a, gpu, work, measured) for a in agents),
            together,
            "A3 + A8: measured H200 FLOP rate",
        ),
        _own("weight sync", agents, {"vllm": sync}, "A9: vLLM agents only", together),
        Phase("exchange", (exchange_s(len(agents), work),), False, "A10: measured (tiny pair)"),
    )
    alternatives = {eager.name: eager, vllm.name: vllm, sync.name: sync}
    return StepEstimate(gpu, tuple(agents), phases, alternatives)


SHARDED_PREFIXES = ("weights (", "AdamW moments", "grads (")
"""The memory plan's terms FSDP2 shards over an agent's ranks (A8); every other term is one
rank's own (its micro-batch, its logits chunk, its KV cache, the bf16 weights it unshards)."""


def sharded(name: str) -> bool:
    return name.startswith(SHARDED_PREFIXES)


def per_gpu_bytes(plan: PolicyPlan, gpus: int) -> dict[str, float]:
    """Each phase's bytes on one of `gpus` FSDP2 ranks: the plan's sharded terms / gpus."""

    def held(terms) -> float:
        return sum(t.bytes / gpus if sharded(t.name) else t.bytes for t in terms)

    state = held(plan.persistent)
    return {phase: state + held(terms) for phase, terms in plan.phases.items()}


@dataclass(frozen=True)
class EngineMemory:
    """One GPU of an agent's vLLM engine (A5): the KV space it preallocates and all the GPU
    holds while it samples (the trainer's resident state beside it)."""

    kv_bytes: float
    sampling_bytes: float


def vllm_engine_memory(
    plan: PolicyPlan, gpus: int, settings: EngineSettings, kv_cache_gib: float | None
) -> EngineMemory:
    """A5 from the engine's settings (`ray.engine_settings.engine_settings` on CUDA with the
    memory figures): `vllm_kv_cache_gib` when set, else the `vllm_gpu_memory_utilization`
    share less the engine's weights per GPU and its workspace."""
    if settings.engine_weight_bytes is None or settings.kv_cache_bytes is None:
        raise ValueError("vllm_engine_memory: the engine settings lack their memory figures")
    resident, _ = rank_update_peak(plan, gpus)
    if kv_cache_gib is not None:
        kv = kv_cache_gib * GIB
        engine = settings.engine_weight_bytes + kv + VLLM_WORKSPACE_BYTES
    else:
        kv = settings.kv_cache_bytes - VLLM_WORKSPACE_BYTES
        engine = settings.kv_cache_bytes + settings.engine_weight_bytes  # the whole share
    return EngineMemory(kv, resident + engine)


def gpu_for(memory_gib: float, kind: str | None = None) -> Gpu:
    """The GPU `kind` names, else the one its memory suggests (>= 100 GiB: H200)."""
    if kind is not None:
        if kind not in GPUS:
            raise ValueError(f"--gpu-kind: {kind!r} is not one of {sorted(GPUS)}")
        return GPUS[kind]
    return GPUS["h200"] if memory_gib >= 100 else GPUS["h100-80gb"]


def assumption_lines(
    gpu: Gpu, work: StepWorkload, measured: Measured = MEASURED, together: bool = True
) -> list[str]:
    mix = work.mix
    rate = train_flops_per_s(gpu, measured)
    return [
        f"step estimate on {gpu.name} ({gpu.bf16_tflops:.0f} TFLOP/s bf16, {gpu.hbm_tb_s} TB/s "
        f"HBM, NVLink {gpu.nvlink_gb_s:.0f} GB/s): assumptions A1-A11 in "
        "algorithms/training/step_estimate.py",
        f"  A1 {work.prompts} prompts x {work.n}, prompts {mix.prompt_tokens} tokens, responses "
        f"<= {mix.cap} ({mix.cut_share:.0%} cut, mean {mix.mean_response:.0f}), "
        f"{work.num_minibatches} minibatches, {work.peer_rows} peer rows scored per receiver; "
        f"A2 padding {work.padding}x",
        f"  A3 training at the H200's measured {measured.flops_per_s / 1e12:.0f} TFLOP/s "
        f"({measured.flops_per_s / 1e12 / MEASURED_GPU.bf16_tflops:.1%} MFU, 740M Llama, "
        f"gradient checkpointing) -> {rate / 1e12:.0f} TFLOP/s here",
        f"  A4 eager decode: {measured.layer_overhead_s * 1e3:.2f} ms per layer per step "
        f"(measured {measured.generate_s / measured.decode_steps * 1e3:.1f} ms steps) + "
        f"memory at {HBM_EFFICIENCY:.0%} of HBM",
        f"  A5 vLLM (not measured): decode at {VLLM_COMPUTE_EFFICIENCY:.0%} of peak FLOP/s or "
        f"{HBM_EFFICIENCY:.0%} of HBM, {VLLM_STEP_OVERHEAD_S * 1e3:.0f} ms per step, continuous "
        "batching over vllm_max_num_seqs slots, KV from the engine's preallocated share; A8 "
        "FSDP2 collectives not overlapped; A9 fp32 gather, sleep level 1 + bucketed sync",
        f"  A10 verify {VERIFY_ITEMS_PER_S:.0f} items/s x {VERIFY_WORKERS} workers; A11 agents "
        f"{'at once (Ray actors)' if together else 'one after the other (local backend)'} in "
        "rollout, update, sync; checkpoints and evaluation not counted",
    ]


def format_estimate(estimate: StepEstimate) -> list[str]:
    """The per-phase table (the step column: max over agents where they run at once, else
    the sum), the totals with either rollout backend, and the target."""
    names = [a.name for a in estimate.agents]
    width = max(12, *(len(n) + 2 for n in names))
    lines = [f"  {'seconds':<30}" + "".join(f"{n:>{width}}" for n in names) + f"{'step':>9}  from"]
    rows: list[tuple[str, Phase]] = []
    for phase in estimate.phases:
        rows.append(("  ", phase))
        if phase.name == "rollout":
            rows += [("    ", estimate.alternatives[ROLLOUT_ROWS[b]]) for b in ROLLOUT_ROWS]
        if phase.name == "weight sync":
            rows.append(("    ", estimate.alternatives[SYNC_ROW]))
    for indent, phase in rows:
        cells = "".join(f"{value:>{width}.1f}" for value in phase.per_agent)
        cells += " " * width * (len(names) - len(phase.per_agent))
        lines.append(f"{indent + phase.name:<32}{cells}{phase.seconds:>9.1f}  {phase.source}")
    low, high = PAPER_STACK_S
    own = "/".join(a.rollout_backend for a in estimate.agents)
    lines.append(f"  total ({own}): {estimate.total:.0f} s = {estimate.total / 60:.1f} min")
    for backend in ROLLOUT_ROWS:
        seconds = estimate.total_with(backend)
        verdict = "meets" if estimate.meets_target(seconds) else "misses"
        lines.append(
            f"  every agent on {backend}: {seconds:.0f} s = {seconds / 60:.1f} min, "
            f"{seconds / high:.2f}-{seconds / low:.2f} x the paper stack's {low / 60:.1f}-"
            f"{high / 60:.0f} min: {verdict} the target (<= {TARGET_FACTOR} x {high / 60:.0f} "
            f"min = {TARGET_S / 60:.0f} min)"
        )
    return lines
