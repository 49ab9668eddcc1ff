"""What one policy holds on its device in each phase of a step (no torch, no weights).

A policy (`graft_env.policies.hf.HFPolicy`) holds, between steps, its weights and AdamW's two
moments (in the weights' dtype), and the frozen reference of a KL loss. On top of that, per
phase of a step:

- generate: `generation_batch_size` rows decoded together with a KV cache of prompt + response
  tokens (under autocast the rotated keys are float32, as the float32 rotary tables promote
  them; values bfloat16), and the bfloat16 copies autocast caches of every linear weight;
- score (peer responses, no grad): one micro-batch (`max_tokens_per_micro_batch` tokens, else
  `score_batch_size` rows) whose shared-prompt forward keeps a KV cache of all its tokens,
  one layer's activations and the log-prob logits;
- update (with grad): one micro-batch (`max_tokens_per_micro_batch` tokens, else
  `micro_batch_size` rows, else the whole minibatch), the gradients, the layers' saved
  activations (with gradient checkpointing: each layer's input, plus one layer recomputed) and
  the log-prob logits.

The log-prob logits are the peak that grows with the vocabulary: the forward holds the
model's logits (compute dtype) and float32 copies: the upcast, log_softmax and, for the
entropy, its exp and their product (`LOGITS_COPIES`). With `logits_chunk_tokens` they
exist for at most that many positions at a time; without it, for every response position of
the micro-batch (`forward.response_logprobs` before chunking).

Attention adds its mask (sdpa: with the additive copy each layer makes of it, and on CUDA the
padded copy the memory-efficient kernel makes of that; eager) and eager's scores to each
phase, by the policy's `attn_implementation` (`memory_plan.attention`); flash and flex
attention add nothing.

Every figure is in bytes; `benchmarks/perf/memory_plan_check.py` compares them with measured
peaks. The device's usable memory is its total less `device.RESERVE_BYTES` (CUDA context,
cuBLAS workspace, allocator slack).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from algorithms.training.memory_plan.architecture import Architecture
from algorithms.training.memory_plan.attention import (
    ALIGNMENT_COPY,
    alignment_copy_bytes,
    eager_scores_bytes,
    mask_bytes,
    mask_columns,
)
from graft_env.policies.options import HFPolicyOptions

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PHASES = ("generate", "score", "update")
LOGITS_COPIES = {"update": 4.0, "score": 2.5}
"""float32 copies of [positions, V] beside the compute-dtype logits at the peak: the upcast,
log_softmax, and for the update's entropy exp(log p) and p log p; scoring (no entropy) holds
the upcast, the temperature-scaled input of log_softmax and its output for part of the time
(2.5 fits the CPU measurements of `memory_plan_check`, 3 would be the bound)."""


@dataclass(frozen=True)
class Workload:
    """What one step asks of a policy (the assumptions a plan prints)."""

    prompt_tokens: int
    response_tokens: int
    minibatch_rows: int
    reference: bool = False

    @property
    def row_tokens(self) -> int:
        return self.prompt_tokens + self.response_tokens


@dataclass(frozen=True)
class Term:
    """One thing in memory: its bytes, the option that bounds it (None: none does) and
    whether only a CUDA device holds it (`cuda_only`: a CPU check leaves it out)."""

    name: str
    bytes: float
    knob: str | None = None
    cuda_only: bool = False


@dataclass(frozen=True)
class PolicyPlan:
    """One policy's memory per phase; `persistent` is held in every phase."""

    architecture: Architecture
    persistent: tuple[Term, ...]
    phases: Mapping[str, tuple[Term, ...]]
    activations_without_checkpointing: float

    def transient(self, phase: str, *, cuda: bool = True) -> float:
        """The phase's terms; `cuda=False`: those a CPU holds too."""
        return sum(term.bytes for term in self.phases[phase] if cuda or not term.cuda_only)

    @property
    def persistent_bytes(self) -> float:
        return sum(term.bytes for term in self.persistent)

    def peak_phase(self) -> str:
        return max(PHASES, key=self.transient)


def compute_bytes(options: HFPolicyOptions) -> int:
    return DTYPE_BYTES[options.autocast or options.dtype]


def layer_activation_bytes(arch: Architecture, options: HFPolicyOptions) -> float:
    """Bytes one token leaves saved for backward in one decoder layer (SDPA attention).

    Residual stream and norms in the weights' dtype (two tensors per norm: its input and
    output); under autocast each linear saves its own bfloat16 cast of its input; RoPE
    promotes q and k to the residual dtype; SDPA saves q and the head-repeated k, v and its
    output; the MLP saves gate, act(gate), up and their product.
    """
    r, c = DTYPE_BYTES[options.dtype], compute_bytes(options)
    h, i = arch.hidden_size, arch.intermediate_size
    q = arch.num_heads * arch.head_dim
    kv = arch.num_kv_heads * arch.head_dim
    casts = c * (3 * h + 2 * h + q) if options.autocast else 0  # q,k,v; gate,up; o_proj
    norms = 2 * 2 * h * r + (2 * 2 * (q + kv) * 4 if arch.qk_norm else 0)
    attention = (q + kv) * (c + r) + c * (q + kv) + 3 * q * c  # q,k,v; rotated; sdpa in/out
    mlp = 4 * i * c
    return casts + norms + attention + mlp


def kv_cache_bytes_per_token(arch: Architecture, options: HFPolicyOptions) -> float:
    kv = arch.num_kv_heads * arch.head_dim
    c = compute_bytes(options)
    key = DTYPE_BYTES[options.dtype] if options.autocast else c  # rotated keys promote
    rope, nope = arch.rope_layers, arch.num_layers - arch.rope_layers
    return kv * (rope * (key + c) + nope * 2 * c)


def _micro_batch_tokens(options: HFPolicyOptions, work: Workload, rows: int | None) -> int:
    """Padded tokens of the largest micro-batch: the token budget, or `rows` rows of the
    longest prompt + response."""
    if options.max_tokens_per_micro_batch is not None:
        return options.max_tokens_per_micro_batch
    return (rows or work.minibatch_rows) * work.row_tokens


def _logits_bytes(
    arch: Architecture, options: HFPolicyOptions, tokens: int, phase: str, work: Workload
) -> float:
    positions = tokens * work.response_tokens / work.row_tokens
    chunk = options.logits_chunk_tokens
    held = positions if chunk is None else min(positions, chunk)
    per_position = arch.vocab_size * (compute_bytes(options) + 4 * LOGITS_COPIES[phase])
    return held * per_position


def _attention_terms(
    arch: Architecture,
    options: HFPolicyOptions,
    tokens: int,
    row_tokens: int,
    knob: str,
    *,
    packed: bool,
    grad: bool,
) -> tuple[Term, ...]:
    """The attention mask and eager scores of one forward of `tokens` tokens in rows of
    `row_tokens` (one row of them all where `packed`; `memory_plan.attention`), where any."""
    c, columns = compute_bytes(options), mask_columns(tokens, row_tokens, packed)
    entries = float(tokens) * columns
    mask = mask_bytes(arch, options, entries, c, DTYPE_BYTES[options.dtype], grad=grad)
    scores = eager_scores_bytes(arch, options, entries, c, grad=grad)
    aligned = alignment_copy_bytes(arch, options, tokens, columns, c, grad=grad)
    terms = (
        Term("attention mask", mask, knob),
        Term(ALIGNMENT_COPY, aligned, knob, cuda_only=True),
        Term("eager attention scores", scores, knob),
    )
    return tuple(term for term in terms if term.bytes > 0)


def plan_policy(arch: Architecture, options: HFPolicyOptions, work: Workload) -> PolicyPlan:
    """What `arch` under `options` holds in each phase of a step of `work`."""
    w = DTYPE_BYTES[options.dtype]
    persistent = [
        Term(f"weights ({options.dtype})", arch.params * w),
        Term(f"AdamW moments (2 x {options.dtype})", 2 * arch.params * w),
    ]
    if work.reference:
        persistent.append(Term("KL reference weights", arch.params * w))
    cache = (
        [Term("autocast bf16 weight copies", arch.linear_params * 2)] if options.autocast else []
    )
    kv_token = kv_cache_bytes_per_token(arch, options)
    layer = layer_activation_bytes(arch, options)
    generate_rows = options.generation_batch_size
    budget = "max_tokens_per_micro_batch" if options.max_tokens_per_micro_batch else None
    score_tokens = _micro_batch_tokens(options, work, options.score_batch_size)
    update_tokens = _micro_batch_tokens(options, work, options.micro_batch_size)
    saved = arch.num_layers * layer * update_tokens
    if options.gradient_checkpointing:
        residual = arch.num_layers * arch.hidden_size * w * update_tokens
        activations = residual + layer * update_tokens
        what = "activations (checkpointed)"
    else:
        activations, what = saved, "activations"
    phases = {
        "generate": (
            *cache,
            Term("KV cache", generate_rows * work.row_tokens * kv_token, "generation_batch_size"),
            *_attention_terms(
                arch,
                options,
                generate_rows * work.prompt_tokens,
                work.prompt_tokens,
                "generation_batch_size",
                packed=False,  # the prefill's left-padded prompt rows
                grad=False,
            ),
        ),
        "score": (
            *cache,
            Term("KV cache", score_tokens * kv_token, budget or "score_batch_size"),
            Term("one layer's activations", score_tokens * layer, budget or "score_batch_size"),
            *_attention_terms(
                arch,
                options,
                score_tokens,
                work.row_tokens,
                budget or "score_batch_size",
                packed=options.padding_free,
                grad=False,
            ),
            Term(
                "log-prob logits",
                _logits_bytes(arch, options, score_tokens, "score", work),
                "logits_chunk_tokens",
            ),
        ),
        "update": (
            *cache,
            Term(f"grads ({options.dtype})", arch.params * w),
            Term(what, activations, budget or "micro_batch_size"),
            *_attention_terms(
                arch,
                options,
                update_tokens,
                work.row_tokens,
                budget or "micro_batch_size",
                packed=options.padding_free,
                grad=True,
            ),
            Term(
                "log-prob logits",
                _logits_bytes(arch, options, update_tokens, "update", work),
                "logits_chunk_tokens",
            ),
        ),
    }
    return PolicyPlan(arch, tuple(persistent), phases, saved)
