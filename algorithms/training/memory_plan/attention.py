"""What attention holds in [L, L]-shaped tensors beyond what `terms.layer_activation_bytes`
counts, by the policy's `attn_implementation` (transformers 5's `masking_utils` and attention
functions, torch's SDPA). Per entry of one forward's [rows, 1, L, L] mask, with c the compute
dtype's bytes (autocast's, else the weights'):

- flash_attention_2 / _3: no mask (varlen kernels read the packed rows' boundaries); nothing;
- flex_attention: a block mask of (L / 128)^2 block indices: negligible, nothing;
- sdpa (and null, transformers' default for the shipped models), wherever a row is padded or
  rows are packed (`padding_free`: one [1, 1, N, N] mask for N packed tokens): a bool mask
  (1 byte) per forward, which torch's SDPA converts to an additive copy in the compute dtype
  on every layer's call (c). The update saves that copy for backward in every layer, one
  layer's under gradient checkpointing (the layer recomputed in backward): 1 + layers * c,
  or 1 + c; a no-grad forward holds one layer's copy at a time: 1 + c;
- sdpa / null on CUDA, a separate term (`ALIGNMENT_COPY`): a masked call goes to the
  memory-efficient kernel, which `preprocess_mask`s the additive copy: a mask whose strides
  are not multiples of 8 (rows of L, or N packed tokens, not a multiple of 8) is padded into a
  new copy with its last dimension rounded up to 8 (`pad_bias<8>`) and sliced back, so while
  it is made the bool mask, the additive copy and the padded one are alive at once, and the
  padded one is what the update saves. Per entry that is one more c-byte copy of one
  forward's mask, 1 + (held + 1) * c, not 1 + held * c, the held copies at the padded width
  (2 GiB more at N = 32,768 in bf16 with checkpointing). The CPU's flash kernel takes the
  additive copy as it is: the CPU measurements compare the other terms, exactly, and
  `gpu_probes` (c) compares this one on CUDA at L = 47 and N = 94. The plan counts it even
  where the longest L is a multiple of 8: a shorter micro-batch's need not be;
- eager: its mask in the embeddings' dtype (the weights', float32 under autocast), and per
  head per layer the float32 softmax of the scores, which the update saves for backward with,
  below float32, the compute-dtype copy the second matmul reads (4 + c, or 4 in float32):
  every layer's (one under checkpointing), plus the layer in backward's two float32
  gradients (of the softmax's output and input); a no-grad forward holds one layer's float32
  scores and softmax and, below float32, the compute-dtype scores beside them (8 + c, or 8;
  under autocast that c is the CPU's float32 temporary of a mixed-dtype add, which CUDA's
  elementwise kernels should not need: a bound there).

`benchmarks/perf/attention_memory.py` measures these on a tiny Qwen3 through the project's
forward (tests/algorithms/training/test_memory_attention.py, CPU). On CUDA a masked call
goes to the memory-efficient kernel (above) or to the math path, which would also save
per-layer scores. Not yet measured on a GPU: `gpu_probes` (c) records it there.

A micro-batch of T padded tokens in rows of L tokens has T / L rows, so its mask has T * L
entries (L columns); a packed one has T^2 (T columns). The bounds take every row at the longest
length (the plan's `Workload`), as the rest of the plan does.
"""

from __future__ import annotations

from algorithms.training.memory_plan.architecture import Architecture
from graft_env.policies.options import HFPolicyOptions

MASKED = (None, "sdpa", "eager")  # the implementations that materialise a mask
SDPA = (None, "sdpa")  # the implementations that call torch's SDPA with a mask
ALIGNMENT_COPY = "sdpa alignment copy (CUDA)"
"""The plan term of the padded copy CUDA's memory-efficient SDPA makes of the mask."""
MEMORY_EFFICIENT_ALIGNMENT = 8
"""The multiple of 8 columns torch pads an unaligned mask to (`preprocess_mask`)."""
FLOAT32 = 4
EAGER_BACKWARD_COPIES = 2
"""float32 [rows, heads, L, L] gradients eager's layer in backward holds beside what it saved:
of the softmax's output and of its input."""


def mask_columns(tokens: int, row_tokens: int, packed: bool) -> int:
    """L of one forward's [rows, 1, L, L] mask over `tokens` tokens in rows of `row_tokens`
    (one row of all of them when `packed`); the mask has `tokens` * L entries."""
    return tokens if packed else row_tokens


def held_layers(arch: Architecture, options: HFPolicyOptions, *, grad: bool) -> int:
    """Layers whose attention tensors are alive at once: every layer's, saved for backward, in
    an update without gradient checkpointing; else one (the layer run or recomputed)."""
    return arch.num_layers if grad and not options.gradient_checkpointing else 1


def _below_float32(compute_bytes: int) -> int:
    """The compute-dtype copy of a float32 tensor: c bytes below float32, none in float32."""
    return compute_bytes if compute_bytes < FLOAT32 else 0


def saved_per_layer(arch: Architecture, options: HFPolicyOptions, compute_bytes: int) -> float:
    """Bytes per mask entry one layer saves for backward in [L, L] tensors: sdpa's additive
    mask; eager's float32 softmax and its compute-dtype copy per head; 0 for flash and flex."""
    if options.attn_implementation == "eager":
        return arch.num_heads * (FLOAT32 + _below_float32(compute_bytes))
    return compute_bytes if options.attn_implementation in MASKED else 0.0


def mask_bytes(
    arch: Architecture,
    options: HFPolicyOptions,
    entries: float,
    compute_bytes: int,
    weight_bytes: int,
    *,
    grad: bool,
) -> float:
    """One forward's mask of `entries` entries: sdpa's bool mask and its additive copies
    (`held_layers` of them), eager's mask in the weights' dtype; 0 for flash and flex."""
    if options.attn_implementation == "eager":
        return entries * weight_bytes
    if options.attn_implementation not in MASKED:
        return 0.0
    copies = held_layers(arch, options, grad=grad) * saved_per_layer(arch, options, compute_bytes)
    return entries * (1 + copies)


def eager_scores_bytes(
    arch: Architecture, options: HFPolicyOptions, entries: float, compute_bytes: int, *, grad: bool
) -> float:
    """Eager attention's [rows, heads, L, L] scores, softmax and their copies and gradients
    (module docstring); 0 for every other implementation (their kernels never hold them)."""
    if options.attn_implementation != "eager":
        return 0.0
    heads = arch.num_heads * entries
    if not grad:
        return heads * (2 * FLOAT32 + _below_float32(compute_bytes))
    saved = held_layers(arch, options, grad=True) * saved_per_layer(arch, options, compute_bytes)
    return saved * entries + heads * EAGER_BACKWARD_COPIES * FLOAT32


def alignment_copy_bytes(
    arch: Architecture,
    options: HFPolicyOptions,
    tokens: int,
    columns: int,
    compute_bytes: int,
    *,
    grad: bool,
) -> float:
    """CUDA's memory-efficient SDPA beyond `mask_bytes` for a mask of `tokens` rows of
    `columns` (module docstring): the padded copy made beside the additive one, and the
    padding columns of the `held_layers` copies saved in its place; 0 but for sdpa / null."""
    if options.attn_implementation not in SDPA:
        return 0.0
    padding = -columns % MEMORY_EFFICIENT_ALIGNMENT  # 0 when aligned
    return tokens * compute_bytes * (columns + held_layers(arch, options, grad=grad) * padding)
