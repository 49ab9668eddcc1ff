"""What attention holds beyond the inputs and outputs `terms.layer_activation_bytes` counts,
by the policy's `attn_implementation` (transformers 5's `masking_utils`):

- flash_attention_2 / _3: no mask (varlen kernels read the packed rows' boundaries); nothing;
- flex_attention: a block mask of (L / 128)^2 block indices: negligible, nothing;
- sdpa (and null, transformers' default for the shipped models): a bool [rows, 1, L, L] mask
  per forward wherever a row is padded (padded micro-batches) or rows are packed
  (`padding_free`: one [1, 1, N, N] mask for N packed tokens) — 1 byte per entry, built once
  per forward and shared by its layers;
- eager: that mask in the compute dtype, and each layer's [rows, heads, L, L] attention
  weights: saved for backward by every layer in the update (one layer under gradient
  checkpointing), transient in a no-grad forward with the float32 softmax beside them.

A micro-batch of T padded tokens in rows of L tokens has T / L rows, so its mask has T * L
entries; a packed one has T^2. The bounds take every row at the longest length (the plan's
`Workload`), as the rest of the plan does.
"""

from __future__ import annotations

from algorithms.training.memory_plan.architecture import Architecture
from graft_env.policies.options import HFPolicyOptions

MASKED = (None, "sdpa", "eager")  # the implementations that materialise a mask


def mask_entries(tokens: int, row_tokens: int, packed: bool) -> float:
    """Entries of one forward's [rows, 1, L, L] mask over `tokens` tokens in rows of
    `row_tokens` (one row of all of them when `packed`)."""
    return float(tokens) ** 2 if packed else float(tokens) * row_tokens


def mask_bytes(
    options: HFPolicyOptions, tokens: int, row_tokens: int, compute_bytes: int, packed: bool
) -> float:
    """One forward's attention mask: bool for sdpa, the compute dtype for eager; 0 for
    flash and flex attention."""
    if options.attn_implementation not in MASKED:
        return 0.0
    per_entry = compute_bytes if options.attn_implementation == "eager" else 1
    return mask_entries(tokens, row_tokens, packed) * per_entry


def eager_scores_bytes(
    arch: Architecture,
    options: HFPolicyOptions,
    tokens: int,
    row_tokens: int,
    compute_bytes: int,
    packed: bool,
    *,
    grad: bool,
) -> float:
    """Eager attention's [rows, heads, L, L] weights: per layer saved for backward when
    `grad` (one layer when checkpointed), else one layer's with its float32 softmax; 0 for
    every other implementation (their kernels never hold them)."""
    if options.attn_implementation != "eager":
        return 0.0
    one_layer = arch.num_heads * mask_entries(tokens, row_tokens, packed)
    if not grad:
        return one_layer * (compute_bytes + 4)
    layers = 1 if options.gradient_checkpointing else arch.num_layers
    return layers * one_layer * compute_bytes
