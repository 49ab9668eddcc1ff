"""The figures the step estimate stands on (A3, A4, A6, A7 of `step_estimate`): the GPUs'
published peaks, the efficiencies and overheads assumed, the H200 measurements of this
project's 740M Llama, and the FLOP and byte rates derived from them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from algorithms.training.memory_plan import Architecture, kv_cache_bytes_per_token
from algorithms.training.ray.engine_settings import kv_bytes_per_token
from graft_env.policies.options import HFPolicyOptions


@dataclass(frozen=True)
class Gpu:
    """A GPU's published peaks (dense bf16 tensor FLOP/s, HBM and NVLink per direction)."""

    name: str
    memory_gib: float
    bf16_tflops: float
    hbm_tb_s: float
    nvlink_gb_s: float


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
MIB = 2**20
SYNC_CALL_S = 5e-3  # A9
ADAMW_BYTES_PER_PARAM = 28  # A8: read p, g, m, v (fp32), write p, m, v
VERIFY_ITEMS_PER_S = 221.4  # A10, verifier_throughput, single process
VERIFY_WORKERS = 8  # A10
EXCHANGE_S_PER_ROW = 0.002 / 256  # A10, step_time.log: graft exchange 0.002 s, 2 x 16 x 8 rows
ACTOR_BYTES_PER_S = 1e9  # A10
ACTOR_BYTES_PER_TOKEN = 8  # A10: int32 id + float32 log-prob


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
    def mfu(self) -> float:
        """That rate as a share of the H200's dense bf16 peak."""
        return self.flops_per_s / (MEASURED_GPU.bf16_tflops * 1e12)

    def at_mfu(self, mfu: float) -> Measured:
        """The same measurement had its update run at `mfu` of the H200's peak (A3's bounds):
        every training rate derived from it moves by mfu / `self.mfu`; decoding does not."""
        return dataclasses.replace(self, update_s=self.update_s * self.mfu / mfu)

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
MFU_BOUNDS = (0.06, 0.25)
"""A3's stated bounds on the training rate, as shares of the GPU's dense bf16 peak (MFU): the
measured 12.4 % is one update of a 740M Llama with a 373-token vocabulary at 136-token rows,
not the paper's 1.7-3B models with 128-152k vocabularies at ~1,000-token rows, and public verl
runs report anywhere from 2 % to 40 %. The range takes the rate at about half and twice the
measured one (issue 37: "uncertain by about 2x"), not the public extremes, which include
set-ups unlike this one. Probe (e) of `benchmarks/perf/gpu_probes.py` (the worker-group rank's
update and scoring at the paper's token counts on a Qwen3-1.7B shape with its real vocabulary)
is the measurement that would replace it, and `benchmarks/perf/worker_group_device_check` the
other (the whole group's rank on its GPUs)."""


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


def gpu_for(memory_gib: float, kind: str | None = None) -> Gpu:
    """The GPU `kind` names, else the one its memory suggests (>= 100 GiB: H200)."""
    if kind is not None:
        if kind not in GPUS:
            raise ValueError(f"--gpu-kind: {kind!r} is not one of {sorted(GPUS)}")
        return GPUS[kind]
    return GPUS["h200"] if memory_gib >= 100 else GPUS["h100-80gb"]
