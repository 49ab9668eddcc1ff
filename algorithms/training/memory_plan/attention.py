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
- eager: its mask in the embeddings' dtype (the weights', float32 under autocast), and per
  head per layer the float32 softmax of the scores, which the update saves for backward with,
  below float32, the compute-dtype copy the second matmul reads (4 + c, or 4 in float32):
  every layer's (one under checkpointing), plus the layer in backward's two float32
  gradients (of the softmax's output and input); a no-grad forward holds one layer's float32
  scores and softmax and, below float32, the compute-dtype scores beside them (8 + c, or 8;
  under autocast that c is the CPU's float32 temporary of a mixed-dtype add, which CUDA's
  elementwise kernels should not need: a bound there).

`benchmarks/perf/attention_memory.py` measures these on a tiny Qwen3 through the project's
forward (tests/algorithms/training/test_memory_attention.py, CPU). CUDA's flash and
memory-efficient kernels may hold otherwise: a masked call goes to the memory-efficient kernel
(expected to save the additive mask as the CPU's flash kernel does) or to the math path, which
would also save per-layer scores. Not yet measured on a GPU: `gpu_probes` (c) records it there.

A micro-batch of T padded tokens in rows of L tokens has T / L rows, so its mask has T * L
entries; a packed one has T^2. The bounds take every row at the longest length (the plan's
`Workload`), as the rest of the plan does.
"""

from __future__ import annotations

from algorithms.training.memory_plan.architecture import Architecture
from graft_env.policies.options import HFPolicyOptions

MASKED = (None, "sdpa", "eager")  # the implementations that materialise a mask
FLOAT32 = 4
EAGER_BACKWARD_COPIES = 2
"""float32 [rows, heads, L, L] gradients eager's layer in backward holds beside what it saved:
of the softmax's output and of its input."""


def mask_entries(tokens: int, row_tokens: int, packed: bool) -> float:
    """Entries of one forward's [rows, 1, L, L] mask over `tokens` tokens in rows of
    `row_tokens` (one row of all of them when `packed`)."""
    return float(tokens) ** 2 if packed else float(tokens) * row_tokens


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
