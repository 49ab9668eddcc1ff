"""The options of a policy: `HFPolicyOptions` (the transformers model and its AdamW) and
`VLLMEngineOptions` (the vLLM rollout engine, `load_policy` options `vllm_<field>`).

No torch here, so a run config's agent options are checked (`graft config validate`,
`algorithms.training.run_config.check_policy_options`) in a fraction of a second, before any model
loads: dtypes are names, which `hf_options.DTYPES` resolves when a model is built.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

DTYPE_NAMES = ("float32", "bfloat16", "float16")
# float16 autocast would need loss scaling (GradScaler), which `update` does not do.
AUTOCAST_DTYPES = (None, "bfloat16")


@dataclass(frozen=True)
class HFPolicyOptions:
    """Options of a transformers policy.

    temperature: the log-prob temperature (see `policies.base`); training forward,
        `score` and recorded generation log-probs all use it.
    dtype: "float32", "bfloat16" or "float16" weights; log-softmax is always float32.
        `update` refuses half-precision weights below lr 1e-4, where AdamW steps
        round away (`policies.precision`); train float32 weights with `autocast`.
    autocast: None, or "bfloat16": mixed precision. Forwards (sampling, scoring,
        training) compute in bfloat16 under `torch.autocast` while the weights and
        AdamW state stay float32 (master weights, as in FSDP's mixed precision), so
        small steps accumulate; it needs dtype "float32". Log-probs then carry
        bfloat16 rounding (generation vs training forward within ~0.1 nats per token).
    device: torch device string ("cpu", "cuda", "cuda:1", ...).
    lr, betas, weight_decay: AdamW hyperparameters (paper: 1e-6, (0.9, 0.999), 0.01).
    grad_clip: max global grad norm per optimiser step (paper: 1.0).
    gradient_checkpointing: trade compute for activation memory in `update`.
    generation_batch_size: sequences decoded together by `generate`.
    score_batch_size: sequences per forward in `score` / `score_tokens`.
    micro_batch_size: sequences per forward inside an `update` minibatch; None runs
        the whole minibatch at once. Either way the gradient is the same.
    max_tokens_per_micro_batch: a token budget instead of a row count: the rows of an
        `update` minibatch, of the old-log-prob pass and of scoring are grouped by length
        into micro-batches of at most this many tokens (prompt + response, padded), as
        verl's `use_dynamic_bsz`; None keeps `micro_batch_size` rows. The loss normaliser
        stays the minibatch's, so the gradient is the same.
    logits_chunk_tokens: the most token positions whose logits are held at once when
        log-probs and entropy are computed (scoring, update, evaluation): the logits peak
        is bounded by this, whatever the response length or row count.
    local_files_only: never contact the model hub (the default on these machines).
    packed_decode: CPU only, float32 without autocast: `generate` runs every
        `nn.Linear` on oneDNN with weights prepacked once per weight version
        (`policies.packed`): sampling 32 rows of SmolLM2-135M 1.7-1.9x faster, one more
        copy of the linear weights in memory, log-probs up to ~5e-5 from the plain
        path's (other rounding), and so another sampled stream. Off by default, so that
        runs sample exactly the stream they always did.
    """

    temperature: float = 1.0
    dtype: str = "float32"
    autocast: str | None = None
    device: str = "cpu"
    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    gradient_checkpointing: bool = False
    generation_batch_size: int = 64
    score_batch_size: int = 64
    micro_batch_size: int | None = None
    max_tokens_per_micro_batch: int | None = None
    logits_chunk_tokens: int = 4096
    local_files_only: bool = True
    packed_decode: bool = False

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"HFPolicyOptions.temperature must be > 0, got {self.temperature}")
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(
                f"HFPolicyOptions.dtype must be one of {list(DTYPE_NAMES)}, got {self.dtype!r}"
            )
        if self.autocast not in AUTOCAST_DTYPES:
            raise ValueError(
                f"HFPolicyOptions.autocast must be one of {AUTOCAST_DTYPES}, got {self.autocast!r}"
            )
        if self.autocast is not None and self.dtype != "float32":
            raise ValueError(
                f"HFPolicyOptions.autocast={self.autocast!r} needs dtype 'float32' (the master "
                f"weights), got dtype {self.dtype!r}"
            )
        for field_name in ("generation_batch_size", "score_batch_size"):
            if getattr(self, field_name) < 1:
                raise ValueError(f"HFPolicyOptions.{field_name} must be >= 1")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ValueError("HFPolicyOptions.micro_batch_size must be >= 1 or None")
        if self.max_tokens_per_micro_batch is not None and self.max_tokens_per_micro_batch < 1:
            raise ValueError("HFPolicyOptions.max_tokens_per_micro_batch must be >= 1 or None")
        if self.logits_chunk_tokens < 1:
            raise ValueError(
                f"HFPolicyOptions.logits_chunk_tokens must be >= 1, got {self.logits_chunk_tokens}"
            )
        if not self.grad_clip > 0:
            raise ValueError(f"HFPolicyOptions.grad_clip must be > 0, got {self.grad_clip}")
        if self.packed_decode and (
            not self.device.startswith("cpu") or self.dtype != "float32" or self.autocast
        ):
            raise ValueError(
                "HFPolicyOptions.packed_decode needs device 'cpu', dtype 'float32' and no "
                f"autocast (oneDNN's float32 GEMM), got device {self.device!r}, dtype "
                f"{self.dtype!r}, autocast {self.autocast!r}"
            )

    @classmethod
    def from_kwargs(cls, **overrides: object) -> HFPolicyOptions:
        """Build options from keyword overrides; unknown names list the valid ones."""
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(overrides) - set(valid))
        if unknown:
            raise TypeError(f"unknown policy option(s) {unknown}; valid options: {valid}")
        if "betas" in overrides:
            overrides["betas"] = tuple(overrides["betas"])  # YAML gives lists
        return cls(**overrides)


OPTION_PREFIX = "vllm_"
"""`load_policy` options named `vllm_<field>` set `VLLMEngineOptions.<field>`."""


@dataclass(frozen=True)
class VLLMEngineOptions:
    """Options of the rollout engine (the trainer keeps its `HFPolicyOptions`).

    kv_cache_gib: KV-cache size in GiB (vLLM `kv_cache_memory_bytes`); None lets
        vLLM size it from `gpu_memory_utilization`. 1 GiB holds ~11k tokens of
        SmolLM2-135M in float32, plenty on CPU. On CPU a set
        `VLLM_CPU_KVCACHE_SPACE` (GiB) overrides it (vLLM's legacy setting).
    gpu_memory_utilization: share of device memory the engine may claim when
        `kv_cache_gib` is None. The trainer shares the device, so keep it low.
    max_model_len: longest prompt + response the engine serves; None takes the
        model's `max_position_embeddings` (the KV cache must hold one such sequence).
    enforce_eager: no torch.compile / CUDA graphs. True suits CPU (compiling costs
        minutes); set False on GPU for speed.
    max_num_seqs: sequences decoded together (vLLM's continuous batch).
    """

    kv_cache_gib: float | None = 1.0
    gpu_memory_utilization: float = 0.3
    max_model_len: int | None = None
    enforce_eager: bool = True
    max_num_seqs: int = 256

    def __post_init__(self) -> None:
        if self.kv_cache_gib is not None and not self.kv_cache_gib > 0:
            raise ValueError(f"VLLMEngineOptions.kv_cache_gib must be > 0, got {self.kv_cache_gib}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                "VLLMEngineOptions.gpu_memory_utilization must be in (0, 1], "
                f"got {self.gpu_memory_utilization}"
            )
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(
                f"VLLMEngineOptions.max_model_len must be >= 1, got {self.max_model_len}"
            )
        if self.max_num_seqs < 1:
            raise ValueError(
                f"VLLMEngineOptions.max_num_seqs must be >= 1, got {self.max_num_seqs}"
            )

    @classmethod
    def from_prefixed(cls, options: dict[str, object]) -> VLLMEngineOptions:
        """Options from `vllm_<field>` keys; unknown ones list the valid names."""
        valid = [f"{OPTION_PREFIX}{f.name}" for f in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise TypeError(f"unknown vLLM engine option(s) {unknown}; valid options: {valid}")
        return cls(**{key.removeprefix(OPTION_PREFIX): value for key, value in options.items()})
