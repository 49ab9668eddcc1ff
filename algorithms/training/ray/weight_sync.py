"""A worker group's weight sync: the FSDP2 shards gathered into the engine in buckets.

After an update every rank of the group holds only its shards. `sync_buckets` walks the
model's tensors in one fixed order on every rank, gathers each with `DTensor.full_tensor()`
(an all-gather every rank takes part in), and the engine-owning rank copies it, cast to the
engine's dtype, into its slot of a staging buffer; the gathered tensor is freed at once.
When a bucket is full the owner hands its slots to `load` (vLLM's `load_weights` through
`collective_rpc`, `engine.llm.VLLMEngine.load`), which returns once the engine's workers
have copied it out (`engine.worker.receive_bucket`: they synchronize their devices before
acknowledging), and only then is the buffer refilled with the next bucket. The staging
buffer is one bucket, never the model: about `vllm_sync_bucket_mb`
MiB, or the largest decoder block when one is larger, because a block (`sync_group`: vLLM
fuses q/k/v and gate/up and reloads a layer from all its tensors at once) travels in one
bucket. Besides the buffer, one gathered tensor (in the trainer's dtype) is alive at a time.

On CUDA every rank whose GPU hosts one of the engine's tensor-parallel workers fills a
buffer of its own (every rank holds the gathered tensor anyway), so each worker reads from
its own GPU (`policies.engine.staging`: buffers keyed by GPU UUID, as vLLM's IPC weight-transfer
engine and OpenRLHF key them); on CPU the owner's shared-memory file serves every worker.

The plan (`plan_buckets`) depends only on names, shapes and the engine dtype, so every rank
computes the same buckets and runs the same all-gathers in the same order. Tied tensors go
once, under their first name (`named_parameters` drops the duplicates), as `WeightStager`
sends them. `SyncStats.peak_gathered_bytes` counts the bytes of gathered tensors alive at
once (each tracked until Python frees it, not the process RSS).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.distributed.tensor import DTensor

from graft_env.policies.engine.staging import WeightSlot, aligned, slot_view, sync_group

MIB = 2**20


def sync_tensors(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """What a sync sends, in a fixed order: the parameters (tied ones once, under their
    first name), then the persistent buffers of the state dict."""
    persistent = set(model.state_dict(keep_vars=True))
    params = list(model.named_parameters())
    buffers = [(name, b) for name, b in model.named_buffers() if name in persistent]
    return params + buffers


def plan_buckets(
    tensors: Sequence[tuple[str, Sequence[int], torch.dtype]], limit_bytes: int
) -> list[list[WeightSlot]]:
    """Buckets of staging slots for (name, shape, engine dtype) in order: consecutive sync
    groups (`sync_group`), a new bucket when the next group would pass `limit_bytes`; a
    group larger than the limit gets a bucket of its own. Offsets start at 0 per bucket."""
    groups: list[list[tuple[str, list[int], torch.dtype, int]]] = []
    for name, shape, dtype in tensors:
        nbytes = aligned(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        entry = (name, list(shape), dtype, nbytes)
        if groups and sync_group(groups[-1][-1][0]) == sync_group(name):
            groups[-1].append(entry)
        else:
            groups.append([entry])
    buckets: list[list[WeightSlot]] = []
    used = 0
    for group in groups:
        size = sum(entry[3] for entry in group)
        if not buckets or (used and used + size > limit_bytes):
            buckets.append([])
            used = 0
        for name, shape, dtype, nbytes in group:
            buckets[-1].append((name, str(dtype).removeprefix("torch."), shape, used))
            used += nbytes
    return buckets


def bucket_bytes(bucket: Sequence[WeightSlot]) -> int:
    """Bytes of the staging buffer `bucket` fills."""
    _, dtype, shape, offset = bucket[-1]
    return offset + aligned(int(np.prod(shape, dtype=np.int64)) * getattr(torch, dtype).itemsize)


@dataclass
class SyncStats:
    """What one sync moved and held."""

    buckets: int = 0
    tensors: int = 0
    bytes: int = 0  # staged, in the engine's dtype
    staging_bytes: int = 0  # the staging buffer (the largest bucket)
    peak_gathered_bytes: int = 0  # gathered full tensors alive at once

    @property
    def peak_extra_bytes(self) -> int:
        """The most the sync held beyond the model: staging buffer + gathered tensors."""
        return self.staging_bytes + self.peak_gathered_bytes


class _Held:
    """Bytes of gathered tensors still alive, and the most at once."""

    def __init__(self) -> None:
        self.now = self.peak = 0

    def track(self, tensor: torch.Tensor) -> None:
        nbytes = tensor.numel() * tensor.element_size()
        self.now += nbytes
        self.peak = max(self.peak, self.now)
        weakref.finalize(tensor, self._free, nbytes)

    def _free(self, nbytes: int) -> None:
        self.now -= nbytes


def _full(tensor: torch.Tensor, held: _Held) -> torch.Tensor:
    """The whole tensor on every rank (an all-gather for a DTensor shard)."""
    if isinstance(tensor, DTensor):
        full = tensor.full_tensor()
        held.track(full)
        return full
    return tensor.detach()


def sync_buckets(
    model: torch.nn.Module,
    engine_dtype: torch.dtype,
    limit_bytes: int,
    *,
    owner: bool,
    staging: Callable[[int], torch.Tensor | None] | None = None,
    load: Callable[[list[WeightSlot]], None] | None = None,
    fence: Callable[[], None] | None = None,
) -> SyncStats:
    """Gather `model`'s tensors bucket by bucket (collective: every rank calls it).

    `staging(nbytes)` (called once, for the largest bucket, on every rank that passes it)
    gives this rank's staging buffer, or None where this rank's device hosts no engine
    worker; each rank with a buffer copies every gathered tensor into it. The owner's
    `load(slots)` hands a filled bucket to its engine and returns once the engine has
    acknowledged it (`engine.worker.receive_bucket`: copies done). `fence()`, on every rank,
    runs after a bucket is filled (the buffers are complete before the engine reads) and
    after it is loaded (no rank refills a buffer before the acknowledgement): the sender's
    half of the no-overwrite-before-acknowledgement protocol."""
    tensors = sync_tensors(model)
    specs = [
        (name, tuple(t.shape), engine_dtype if t.is_floating_point() else t.dtype)
        for name, t in tensors
    ]
    buckets = plan_buckets(specs, limit_bytes)
    stats = SyncStats(buckets=len(buckets), tensors=len(tensors))
    stats.staging_bytes = max((bucket_bytes(b) for b in buckets), default=0)
    buffer = staging(stats.staging_bytes) if staging is not None else None
    if owner and (buffer is None or load is None):
        raise ValueError("sync_buckets: the owner needs a staging buffer and load")
    fence = fence or (lambda: None)
    held = _Held()
    source = iter(tensors)
    with torch.no_grad():
        for bucket in buckets:
            for slot in bucket:
                name, tensor = next(source)
                assert name == slot[0], (name, slot[0])  # the plan keeps the model's order
                full = _full(tensor, held)
                if buffer is not None:
                    view = slot_view(buffer, slot)
                    view.copy_(full)
                    stats.bytes += view.numel() * view.element_size()
                del full
            fence()
            if owner:
                load(bucket)
            fence()
    stats.peak_gathered_bytes = held.peak
    return stats
