"""What `graft plan` advises about the launch environment (the CUDA allocator's settings)."""

from __future__ import annotations

ALLOCATOR_VAR = "PYTORCH_CUDA_ALLOC_CONF"
ALLOCATOR_SETTING = "expandable_segments:True"


def allocator_hint() -> str | None:
    """A line when the CUDA allocator is not told to expand segments (fragmentation)."""
    import os

    if ALLOCATOR_SETTING in os.environ.get(ALLOCATOR_VAR, ""):
        return None
    return (
        f"hint: set {ALLOCATOR_VAR}={ALLOCATOR_SETTING} before launching: variable-length "
        "micro-batches fragment the default allocator's fixed segments"
    )
