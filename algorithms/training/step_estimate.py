"""The time of one training step on GPUs, per phase, estimated from the configs and from this
project's own H200 measurements (pure arithmetic: no torch, no weights).

What it answers: how long one step of a run config takes on a node of GPUs (each agent on k
GPUs), phase by phase (rollout, verify, scoring, update, weight sync, exchange), and how that
compares with the paper stack's ~2.5-4 min per step (issue 28's estimate for verl on 4 x H200).
Nothing here has been checked against a GPU run of the paper configs: no such run exists.

This module composes one step (`estimate_step`); its parts are in `step_time/`: the measured
anchors and rates, the workload, each phase's model, the totals and target, each GPU's
memory when sharded, and the table `graft plan` prints.

Assumptions A1-A11 were written down before any number was computed (ca88099); the estimate
is what comes out of them. They have been amended since, each amendment recorded below with
the figures it moved (pair 1 = configs/paper_smollm3_qwen3.yaml, the worker-group file, named
paper_smollm3_qwen3_1node.yaml when these were written, `graft plan ... --gpus 4`, 4 x H200 /
4 x H100-80GB; the local-backend file was then paper_smollm3_qwen3.yaml, now
paper_smollm3_qwen3_local.yaml):

- 8ec41df, after seeing the output: A11 had every backend's agents run rollout, update and
  sync at once; the local backend (every policy in the driver) runs them one after the
  other. Moved: the local-backend figures only (paper_smollm3_qwen3_local.yaml on 4 x H200: 65 min
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
  needs at most 15.4 / 24.0 GiB of KV per GPU: no stretch. paper_smollm3_qwen3_local.yaml (local
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
    450 GB/s, A100 300 GB/s).
A8. FSDP2 over k GPUs (worker groups): per micro-batch and rank, 3 all-gathers of the bf16
    weights (no-grad pass, forward, backward) and one reduce-scatter of float32 gradients,
    each moving (k-1)/k of its bytes over A7's link, not overlapped with compute (an upper
    bound: FSDP2 prefetches). AdamW reads and writes 28 bytes per parameter shard per step at
    A6's bandwidth. Generation and scoring unshard the whole model once per call.
A9. Weight sync (vLLM only): the FSDP shards all-gathered in the trainer's float32 (4 bytes
    per parameter: `DTensor.full_tensor()` of the master weights, cast to the engine's bf16
    afterwards, `ray.weight_sync`) over A7's link, written into the engine (read + write of
    its bf16 shard, A6), in buckets of `vllm_sync_bucket_mb` (default 512 MiB) of bf16 at
    5 ms of call overhead each; each rank writes every bucket into its own GPU's staging
    buffer and the engine worker there clones it before acknowledging (3 x the bf16 weights
    at A6). The engine sleeps at level 2 (the sync rewrites every weight): nothing crosses
    to the host.
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

- Issue 37 (the estimate's uncertainty): the central figures did not move; `graft plan` now
  also prints the step at A3's stated bounds (`anchors.MFU_BOUNDS`, 6 % and 25 % MFU against
  the measured 12.4 %, `estimate_bounds`), the share of the step that rests on the measured
  rate, and the vLLM rollout as not measured (held fixed in the range). Pair 1 with vLLM:
  4 x H200 204 s (3.4 min), 77 % of it the update and scoring at the measured rate, 125-369 s
  (2.1-6.1 min) between the bounds, the slow end past the 6-min target; 4 x H100-80GB 216 s,
  137-381 s. The vLLM rollout (46 / 58 s) is not measured. `update_s` now takes its rate
  from its `measured` argument, as scoring did (it used the default whatever it was given; no
  figure moved). A9 follows the engine lifecycle: sleep level 2 (the sync rewrites every
  weight), so no host round trip over PCIe (that term and A7's PCIe rate are gone), and each
  GPU's staging bucket written and cloned by the engine worker: sync 0.33 / 0.19 s -> 0.09 / 0.05 s
  (SmolLM3 / Qwen3, 4 x H200); pair 1's step unchanged at 204 s (216 s on H100-80GB).

The target (issue 28): within 1.5 x the paper stack's estimate, i.e. at most 1.5 x 4 min =
6 min per step (`TARGET_S`); the ratio to the lower end (2.5 min) is reported beside it.
"""

from __future__ import annotations

from collections.abc import Sequence

from algorithms.training.step_time.anchors import MEASURED, MFU_BOUNDS, Gpu, Measured
from algorithms.training.step_time.phases import (
    eager_rollout_s,
    exchange_s,
    scoring_s,
    update_s,
    verify_s,
    vllm_rollout_s,
    weight_sync_s,
)
from algorithms.training.step_time.totals import ROLLOUT_ROWS, SYNC_ROW, Phase, StepEstimate
from algorithms.training.step_time.workload import Agent, StepWorkload


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


def estimate_bounds(
    agents: Sequence[Agent],
    gpu: Gpu,
    work: StepWorkload | None = None,
    kv_available: Sequence[float | None] | None = None,
    together: bool = True,
) -> tuple[StepEstimate, StepEstimate]:
    """The step at A3's bounds on the training rate (`MFU_BOUNDS`): (fast, slow), the
    estimate with every training term at the high and at the low MFU; the terms that do not
    rest on it (decoding, vLLM, the sync, verify, exchange) are those of `estimate_step`."""
    low, high = MFU_BOUNDS
    fast, slow = (
        estimate_step(agents, gpu, work, kv_available, MEASURED.at_mfu(mfu), together)
        for mfu in (high, low)
    )
    return fast, slow
