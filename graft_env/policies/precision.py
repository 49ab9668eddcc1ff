"""Which weight precisions can be trained at which learning rate (no torch import, so
run configs can check it before any model loads).

AdamW updates half-precision weights in place, so a step smaller than a weight's
rounding spacing is lost. bfloat16 keeps 8 significant bits: a weight of typical
size |w| ~ 0.02 moves in steps of ~1e-4, and an Adam step is about lr, so at the
paper's lr 1e-6 nearly every step rounds away (measured on an H200: even at lr 1e-4
one step left 12-59 % of bfloat16 weights unchanged). float16 keeps 3 more bits, but
the same bound is used for both. Mixed precision (float32 weights, bfloat16
autocast) has no such floor.
"""

from __future__ import annotations

HALF_PRECISION_DTYPES = ("bfloat16", "float16")
HALF_PRECISION_MIN_LR = 1e-4


def half_precision_training_error(dtype: str, lr: float) -> str | None:
    """Why training `dtype` weights at `lr` would barely move them, or None if it is fine."""
    if dtype not in HALF_PRECISION_DTYPES or lr >= HALF_PRECISION_MIN_LR:
        return None
    return (
        f"dtype={dtype!r} with lr={lr:g}: AdamW steps this small are rounded away on "
        f"{dtype} weights, so training would not move the model; set dtype: float32 and "
        f"autocast: bfloat16 (mixed precision), or lr >= {HALF_PRECISION_MIN_LR:g}"
    )
