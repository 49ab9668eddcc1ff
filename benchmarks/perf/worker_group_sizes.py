"""`worker_group_device_check`'s sizes and what they are measured against: the stages' token
counts (`FULL`, `SMOKE`), the Qwen3 agent's policy options from the paper config, the random
batches, the memory plan per phase on one rank, the step estimate's update seconds and each
stage's expected seconds (the time budget's per-stage bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.training.memory_plan import Architecture, Workload, plan_policy
from algorithms.training.step_time.anchors import GPUS
from algorithms.training.step_time.gpu_memory import per_gpu_bytes
from algorithms.training.step_time.phases import update_s
from algorithms.training.step_time.workload import Agent, LengthMix, StepWorkload
from graft_env.types import TrainBatch, TrainSequence

MODEL = "Qwen/Qwen3-1.7B-Base"


@dataclass(frozen=True)
class Size:
    """The stages' token counts."""

    peak_prompts: int
    peak_prompt_tokens: int
    peak_response_tokens: int
    paper_prompts: int
    peer_rows: int
    generate_prompts: int
    generate_tokens: int
    budget: int
    chunk: int
    mix: LengthMix
    n: int = 8
    warm_rows: int = 8
    warm_tokens: int = 64


FULL = Size(8, 512, 4096, 32, 16, 8, 32, 32768, 4096, LengthMix())
SMOKE = Size(
    2, 8, 24, 2, 4, 2, 4, 128, 16, LengthMix(prompt_tokens=8, cap=24, median=6), warm_tokens=8
)


PAPER_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "paper_smollm3_qwen3.yaml"
PAPER_AGENT = "qwen3-1.7b"
NOT_HERE = ("rollout_backend", "local_files_only")
"""Options this script sets itself: the trainer samples (no vLLM here), no download."""


def options_for(size: Size, device: str) -> dict[str, Any]:
    """The Qwen3 agent's policy options as `PAPER_CONFIG` gives them (lr, betas, weight decay,
    grad clip, precision, checkpointing, batch sizes), on CPU too (bf16 autocast; FSDP2
    keeps full precision there: `fsdp.mixed_precision`). Overridden: the device, the
    micro-batch budget and the logits chunk (the size's), sampling with transformers (no
    `vllm_` options), local files only."""
    from algorithms.training.run_config import load_config
    from graft_env.policies.options import OPTION_PREFIX

    config = load_config(PAPER_CONFIG)
    (agent,) = [a for a in config.agents if a.name == PAPER_AGENT]
    options = {
        key: value
        for key, value in agent.options.items()
        if not key.startswith(OPTION_PREFIX) and key not in NOT_HERE
    }
    return {
        **options,
        "device": device,
        "max_tokens_per_micro_batch": size.budget,
        "logits_chunk_tokens": size.chunk,
        "local_files_only": True,
    }


def exact_batch(
    vocab: int, prompts: int, n: int, prompt_tokens: int, response_tokens: int, seed: int
) -> TrainBatch:
    """`random_models.grpo_batch`: every row exactly `prompt_tokens` + `response_tokens`."""
    from benchmarks.perf.random_models import grpo_batch

    return grpo_batch(vocab, prompts, n, prompt_tokens, response_tokens, seed=seed)


def mix_batch(vocab: int, prompts: int, n: int, mix: LengthMix, seed: int) -> TrainBatch:
    """`prompts` x `n` random responses of the paper's length mix (A1, `LengthMix`):
    prompts of 80-200 tokens (scaled to the mix's prompt length), `cut_share` of the
    responses at the cap, the rest log-normal; advantages +-0.5; one minibatch."""
    rng = np.random.default_rng(seed)
    low, high = max(2, mix.prompt_tokens * 80 // 140), max(3, mix.prompt_tokens * 200 // 140)
    texts = [
        " ".join(["<s>", *(f"t{i}" for i in rng.integers(4, vocab, int(length) - 1))])
        for length in rng.integers(low, high, prompts)
    ]
    rows = prompts * n
    lengths = np.minimum(
        rng.lognormal(np.log(mix.median), mix.sigma, rows).astype(int) + 1, mix.cap
    )
    lengths[rng.random(rows) < mix.cut_share] = mix.cap
    sequences = [
        TrainSequence(
            j // n,
            [int(i) for i in rng.integers(4, vocab, int(length))],
            np.full(int(length), -np.log(vocab)),
            advantage=float(j % 2) - 0.5,
        )
        for j, length in enumerate(lengths)
    ]
    return TrainBatch("random", texts, sequences, [list(range(rows))])


def plan_for(arch: Architecture, options: dict[str, Any], work: Workload) -> dict[str, float]:
    """The memory plan's bytes per phase on one rank of a 1-rank group."""
    from graft_env.policies.options import HFPolicyOptions

    return per_gpu_bytes(plan_policy(arch, HFPolicyOptions.from_kwargs(**options), work), 1)


def update_estimate_s(arch: Architecture, options: dict, size: Size, peak: bool) -> float:
    """The step estimate's update (A3) on one H200 of one minibatch: the paper mix's
    (`update_paper`) or every row at the peak stage's exact lengths (`update_peak`)."""
    from graft_env.policies.options import HFPolicyOptions

    hf = HFPolicyOptions.from_kwargs(**options)
    if peak:
        mix = LengthMix(
            prompt_tokens=size.peak_prompt_tokens, cap=size.peak_response_tokens, cut_share=1.0
        )
        work = StepWorkload(prompts=size.peak_prompts, num_minibatches=1, padding=1.0, mix=mix)
    else:
        work = StepWorkload(prompts=size.paper_prompts, num_minibatches=1, mix=size.mix)
    return update_s(Agent("measured", arch, hf, gpus=1, group=True), GPUS["h200"], work)


STAGE_FLOOR_S = 20.0
"""Every stage's fixed allowance (allocator warm-up, kernel loads, small copies)."""
UPDATE_MARGIN = 3.0
"""An update stage is expected to take up to this many times `step_time.phases.update_s`."""
DISK_BYTES_PER_S = 0.5e9
"""Assumed scratch-disk bandwidth, read or write (low on purpose: network-backed disks)."""
HOST_BYTES_PER_S = 2e9
"""Assumed device-to-host copy rate of the checkpoint stage's snapshots (pageable)."""


def expected_seconds(arch: Architecture, options: dict[str, Any], size: Size) -> dict[str, float]:
    """Each stage's conservative duration (the time budget's per-stage bound): the floor,
    plus UPDATE_MARGIN x the step estimate for the updates, plus the bytes of the files and
    copies at the assumed disk and host bandwidths. The checkpoint stage: its DCP shards
    (fp32 weights + 2 AdamW moments = 12 bytes per parameter) and the HF export (4) written,
    the shards read back, three host snapshots of weights and moments (12 each)."""
    params = arch.params
    update = {
        "update_peak": update_estimate_s(arch, options, size, peak=True),
        "update_paper": update_estimate_s(arch, options, size, peak=False),
    }
    disk = {"build": 4 * params, "setup": 4 * params, "checkpoint": (16 + 12) * params}
    host = {"checkpoint": 3 * 12 * params}
    stages = ("build", "setup", "warm_up", "update_peak", "update_paper", "score", "generate",
              "checkpoint")  # fmt: skip
    return {
        name: STAGE_FLOOR_S
        + UPDATE_MARGIN * update.get(name, 0.0)
        + disk.get(name, 0.0) / DISK_BYTES_PER_S
        + host.get(name, 0.0) / HOST_BYTES_PER_S
        for name in stages
    }
