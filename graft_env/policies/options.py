"""The options of a policy: `HFPolicyOptions` (the transformers model and its AdamW),
`LoaderOptions` (what `load_policy` itself takes) and `VLLMEngineOptions` (the vLLM rollout
engine, `load_policy` options `vllm_<field>`).

Each is a frozen dataclass of typed fields with help (`graft_env.schema`), checked when it
is built: a bad value is one line, `HFPolicyOptions.lr: -1 must be >= 0`. No torch here,
so a run config's agent options are checked (`graft config validate`,
`algorithms.training.run_config.check_policy_options`) in a fraction of a second, before any
model loads: dtypes are names, which `loading.DTYPES` resolves when a model is built.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from graft_env.schema import (
    Count,
    Flag,
    Fraction,
    NonNegative,
    OptionError,
    PathText,
    Positive,
    PositiveFloat,
    Share,
    Text,
    check_fields,
)

DTYPE_NAMES = ("float32", "bfloat16", "float16")
# float16 autocast would need loss scaling (GradScaler), which `update` does not do.
AUTOCAST_DTYPES = (None, "bfloat16")
ROLLOUT_BACKENDS = ("transformers", "vllm")
# transformers' attention implementations a policy may load with (None: the model's default,
# sdpa where it supports it); `policies.forward.PACKING_ATTENTION` says how each packs rows.
ATTENTION_IMPLEMENTATIONS = (
    None,
    "sdpa",
    "eager",
    "flex_attention",
    "flash_attention_2",
    "flash_attention_3",
)


@dataclass(frozen=True)
class HFPolicyOptions:
    """Options of a transformers policy (paper: lr 1e-6, betas (0.9, 0.999), weight decay
    0.01, grad clip 1.0)."""

    temperature: PositiveFloat = field(
        default=1.0,
        metadata={
            "help": (
                "the log-prob temperature (policies.base): training forward, score and recorded "
                "generation log-probs all use it"
            )
        },
    )
    dtype: Literal[DTYPE_NAMES] = field(
        default="float32",
        metadata={
            "help": (
                "weights' dtype; log-softmax is always float32. `update` refuses half-precision "
                "weights below lr 1e-4, where AdamW steps round away (policies.precision); train "
                "float32 weights with autocast"
            )
        },
    )
    autocast: Literal[AUTOCAST_DTYPES] = field(
        default=None,
        metadata={
            "help": (
                "null, or 'bfloat16': mixed precision. Forwards (sampling, scoring, training) "
                "compute in bfloat16 under torch.autocast while the weights and AdamW state stay "
                "float32 (master weights, as FSDP's mixed precision), so small steps accumulate; "
                "needs dtype 'float32'. Log-probs then carry bfloat16 rounding (generation vs "
                "training forward within ~0.1 nats per token)"
            )
        },
    )
    device: Text = field(
        default="cpu", metadata={"help": "torch device string ('cpu', 'cuda', 'cuda:1', ...)"}
    )
    lr: NonNegative = field(default=1e-6, metadata={"help": "AdamW learning rate (paper: 1e-6)"})
    betas: tuple[Fraction, Fraction] = field(
        default=(0.9, 0.999), metadata={"help": "AdamW betas (paper: (0.9, 0.999))"}
    )
    weight_decay: NonNegative = field(
        default=0.01, metadata={"help": "AdamW weight decay (paper: 0.01)"}
    )
    grad_clip: PositiveFloat = field(
        default=1.0, metadata={"help": "max global grad norm per optimiser step (paper: 1.0)"}
    )
    gradient_checkpointing: Flag = field(
        default=False, metadata={"help": "trade compute for activation memory in `update`"}
    )
    generation_batch_size: Positive = field(
        default=64, metadata={"help": "sequences decoded together by `generate`"}
    )
    score_batch_size: Positive = field(
        default=64, metadata={"help": "sequences per forward in `score` / `score_tokens`"}
    )
    micro_batch_size: Positive | None = field(
        default=None,
        metadata={
            "help": (
                "sequences per forward inside an `update` minibatch; null runs the whole minibatch "
                "at once. Either way the gradient is the same"
            )
        },
    )
    max_tokens_per_micro_batch: Positive | None = field(
        default=None,
        metadata={
            "help": (
                "a token budget instead of a row count: the rows of an `update` minibatch, of the "
                "old-log-prob pass and of scoring are grouped by length into micro-batches of at "
                "most this many tokens (prompt + response, padded), as verl's use_dynamic_bsz; null"
                " keeps micro_batch_size rows. The loss normaliser stays the minibatch's, so the "
                "gradient is the same"
            )
        },
    )
    logits_chunk_tokens: Positive | None = field(
        default=None,
        metadata={
            "help": (
                "the most token positions whose logits are held at once when log-probs and entropy "
                "are computed (scoring, update): the logits peak is bounded by this, whatever the "
                "response length or row count (one chunk ~4 float32 copies of [chunk, vocabulary])."
                " null: one pass over the micro-batch, the ops every shipped result was computed "
                "with (the paper configs set 4096)"
            )
        },
    )
    padding_free: Flag = field(
        default=False,
        metadata={
            "help": (
                "scoring and update forwards pack each micro-batch's rows into one row without "
                "padding, position ids restarting per row (policies.forward, verl's "
                "use_remove_padding): flash_attention_* run varlen kernels, sdpa / eager a "
                "block-diagonal mask (`attn_implementation`; null loads transformers' default, "
                "sdpa: the masked form, whose bool mask is N^2 bytes for N packed tokens and "
                "whose per-layer copy is N^2 in the compute dtype); the token budget counts "
                "real tokens; repeated prompts are then not shared. Log-probs and gradients equal "
                "the padded path's to float rounding. Refused in one line where the attention "
                "implementation cannot pack"
            )
        },
    )
    local_files_only: Flag = field(
        default=False,
        metadata={
            "help": "read a Hugging Face Hub id only from the local Hugging Face cache, never "
            "downloading it (false: download it once, then read the cache)"
        },
    )
    packed_decode: Flag = field(
        default=False,
        metadata={
            "help": (
                "CPU only, float32 without autocast: `generate` runs every nn.Linear on oneDNN with"
                " weights prepacked once per weight version (policies.packed): sampling 32 rows of "
                "SmolLM2-135M 1.7-1.9x faster, one more copy of the linear weights in memory, "
                "log-probs up to ~5e-5 from the plain path's (other rounding), and so another "
                "sampled stream. Off by default, so that runs sample exactly the stream they always"
                " did"
            )
        },
    )

    attn_implementation: Literal[ATTENTION_IMPLEMENTATIONS] = field(
        default=None,
        metadata={
            "help": (
                "transformers' attention for scoring, update and transformers sampling (vLLM picks"
                " its own): null, the model's default (sdpa); 'flash_attention_2' / '_3' (the "
                "flash-attn package, CUDA, half-precision compute): no mask, varlen kernels for "
                "padding_free; 'sdpa' / 'eager' build a [rows, 1, L, L] mask (N^2 for N packed "
                "tokens), which sdpa copies per layer in the compute dtype (an update without "
                "gradient checkpointing keeps every layer's copy), and eager also holds every "
                "layer's [rows, heads, L, L] float32 softmax"
            )
        },
    )

    def __post_init__(self) -> None:
        where = type(self).__name__
        check_fields(self, where)
        if self.autocast is not None and self.dtype != "float32":
            raise OptionError(
                where,
                "autocast",
                f"autocast={self.autocast!r} needs dtype 'float32' (the master weights), got "
                f"dtype {self.dtype!r}",
            )
        if self.packed_decode and (
            not self.device.startswith("cpu") or self.dtype != "float32" or self.autocast
        ):
            raise OptionError(
                where,
                "packed_decode",
                "packed_decode needs device 'cpu', dtype 'float32' and no autocast (oneDNN's "
                f"float32 GEMM), got device {self.device!r}, dtype {self.dtype!r}, autocast "
                f"{self.autocast!r}",
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


@dataclass(frozen=True)
class LoaderOptions:
    """The options `load_policy` takes itself (its keyword arguments), beside the
    `HFPolicyOptions` and `vllm_<field>` ones."""

    cache_dir: PathText | None = field(
        default=None,
        metadata={"help": "the model cache (null: $GRAFT_CACHE_DIR, else ~/.cache/graft)"},
    )
    tiny_seed: Count = field(
        default=0, metadata={"help": "seed of the tiny/testbed pair to load (built if missing)"}
    )
    rollout_backend: Literal[ROLLOUT_BACKENDS] = field(
        default="transformers",
        metadata={
            "help": (
                "what samples: 'transformers' (HFPolicy) or 'vllm' (an in-process vLLM engine, "
                "synced after every update; options vllm_<field>)"
            )
        },
    )

    def __post_init__(self) -> None:
        check_fields(self, type(self).__name__)


OPTION_PREFIX = "vllm_"
"""`load_policy` options named `vllm_<field>` set `VLLMEngineOptions.<field>`."""


@dataclass(frozen=True)
class VLLMEngineOptions:
    """Options of the rollout engine (the trainer keeps its `HFPolicyOptions`)."""

    kv_cache_gib: PositiveFloat | None = field(
        default=1.0,
        metadata={
            "help": (
                "KV-cache size in GiB (vLLM kv_cache_memory_bytes); null lets vLLM size it from "
                "gpu_memory_utilization. 1 GiB holds ~11k tokens of SmolLM2-135M in float32, plenty"
                " on CPU. On CPU a set VLLM_CPU_KVCACHE_SPACE (GiB) overrides it (vLLM's legacy "
                "setting)"
            )
        },
    )
    gpu_memory_utilization: Share = field(
        default=0.3,
        metadata={
            "help": (
                "share of device memory the engine may claim when kv_cache_gib is null; the trainer"
                " shares the device, so keep it low"
            )
        },
    )
    max_model_len: Positive | None = field(
        default=None,
        metadata={
            "help": (
                "longest prompt + response the engine serves; null takes the model's "
                "max_position_embeddings (the KV cache must hold one such sequence)"
            )
        },
    )
    enforce_eager: Flag = field(
        default=True,
        metadata={
            "help": (
                "no torch.compile / CUDA graphs. True suits CPU (compiling costs minutes); set "
                "false on GPU for speed"
            )
        },
    )
    max_num_seqs: Positive = field(
        default=256, metadata={"help": "sequences decoded together (vLLM's continuous batch)"}
    )
    tensor_parallel_size: Positive | None = field(
        default=None,
        metadata={
            "help": (
                "vLLM tensor parallelism; null: 1. Above 1 only on CPU: the policy stages its "
                "weights on its one GPU"
            )
        },
    )
    seed_scope: Literal["request", "step"] = field(
        default="request",
        metadata={
            "help": (
                "request: every request seeded from the call's seed and its index (bit-"
                "reproducible; vLLM's CUDA sampler then takes its per-request path). step: the "
                "engine's generators seeded once per call and requests unseeded (one batched "
                "draw, as TRL seeds its engine); reproducible only where the engine's "
                "scheduling is, which vLLM's multiprocess engine does not promise"
            )
        },
    )
    sleep_mode: Flag | None = field(
        default=None,
        metadata={
            "help": (
                "vLLM enable_sleep_mode: the engine sleeps right after each generate (level 1: "
                "the sync sends only the blocks that changed) and wakes its weights for the "
                "sync, its KV cache before generating (policies.engine.cycle). CUDA only; null: "
                "on with device cuda, off on CPU (true on CPU is refused)"
            )
        },
    )

    def __post_init__(self) -> None:
        check_fields(self, type(self).__name__)

    def sleeps(self, device_type: str) -> bool:
        """Whether the engine runs in sleep mode on a `device_type` ('cuda', 'cpu') device:
        `sleep_mode`, null meaning on with CUDA; true off CUDA is refused (one line)."""
        if self.sleep_mode and device_type != "cuda":
            raise OptionError(
                type(self).__name__,
                "sleep_mode",
                f"true needs device cuda (vLLM's sleep mode releases GPU memory), the device is "
                f"{device_type!r}; leave it null",
            )
        return device_type == "cuda" if self.sleep_mode is None else self.sleep_mode

    @classmethod
    def from_prefixed(cls, options: dict[str, object]) -> VLLMEngineOptions:
        """Options from `vllm_<field>` keys; unknown ones list the valid names."""
        valid = [f"{OPTION_PREFIX}{f.name}" for f in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise TypeError(f"unknown vLLM engine option(s) {unknown}; valid options: {valid}")
        return cls(**{key.removeprefix(OPTION_PREFIX): value for key, value in options.items()})


def policy_option_classes() -> tuple[tuple[str, type], ...]:
    """The option classes of an agent's `options` (a run config's `agents.N.options`), with
    the prefix their keys carry there: what `load_policy(name, **options)` accepts."""
    return (("", HFPolicyOptions), ("", LoaderOptions), (OPTION_PREFIX, VLLMEngineOptions))
