"""The trainer's side of the weight transfer into a vLLM engine: staging buffers and slots.

The tensors do not cross the RPC. A staging buffer holds them, cast to the engine's dtype,
and the RPC carries only each tensor's name, dtype, shape and byte offset (a `WeightSlot`);
the engine's workers load views of the buffer (`engine.worker`). A buffer is a shared-memory
file on CPU and device memory shared by a CUDA IPC handle on GPU.

One buffer per GPU, keyed by the GPU's UUID (`device_key`), as vLLM's own IPC weight-transfer
engine (`vllm/distributed/weight_transfer/ipc_engine.py`: `ipc_handles` map a physical GPU
UUID to a handle) and OpenRLHF (`vllm_worker_wrap.update_weight_cuda_ipc`,
`get_physical_gpu_id`) key them: each tensor-parallel worker opens the buffer on its own
device and rewrites the handle's device index to its own (`open_buffer`), so no worker
reads across GPUs or opens a CUDA context on another rank's GPU, and UUID-form or reordered
`CUDA_VISIBLE_DEVICES` cannot make it open the wrong one. On CPU there is one file, key
"cpu", which every worker maps.

CUDA buffers are allocated with expandable segments off (`expandable_segments_off`, as
verl's `fsdp_workers.rollout_mode` does with `set_expandable_segments(False)` around the
sync): a tensor in an expandable segment is shared over CUDA IPC through `pidfd_getfd`,
which unprivileged containers refuse.

`WeightStager` is a single-process policy's buffer: laid out once for the whole state dict,
refilled with the blocks that changed (`sync_group`).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

WeightSlot = tuple[str, str, list[int], int]
"""(name, torch dtype name, shape, byte offset in the staging buffer): what the RPC
carries per tensor."""

BufferHandle = tuple
"""How a process opens one staging buffer: ("file", path, bytes) on CPU, ("cuda", pickled
`reduce_tensor` IPC handle) on GPU."""

BufferHandles = dict[str, BufferHandle]
"""The staging buffers of one sync, by device key (`device_key`): a GPU's UUID, or "cpu"."""

_ALIGN = 64  # slot offsets: any dtype view of the buffer starts aligned
_ALLOC_CONF = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def aligned(nbytes: int) -> int:
    """`nbytes` rounded up to the slot alignment: the next slot's offset."""
    return -(-nbytes // _ALIGN) * _ALIGN


def sync_group(name: str) -> str:
    """The unit a sync sends whole: the name up to its first numeric part (a decoder
    block, ``model.layers.3``), else its module (``model.norm``). vLLM fuses q/k/v and
    gate/up within a block, and its layerwise reload leaves a layer that receives only
    some of its tensors uninitialised, so a block travels whole or not at all."""
    parts = name.split(".")
    for index, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: index + 1])
    return ".".join(parts[:-1]) or name


def tensor_version(tensor: torch.Tensor) -> tuple[int, int]:
    """Changes when the tensor is replaced or written in place (optimizer steps,
    `load_state_dict`): its address and torch's version counter, which a state dict's
    detached tensors share with the parameters. Writes through ``.data`` escape it."""
    return tensor.data_ptr(), tensor._version


def device_key(device: torch.device) -> str:
    """The key of `device`'s staging buffer: the physical GPU's UUID (the same in every
    process, whatever its CUDA_VISIBLE_DEVICES), or "cpu"."""
    if device.type != "cuda":
        return "cpu"
    return str(torch.cuda.get_device_properties(device).uuid)


def expandable_segments_requested() -> bool:
    """Whether the process's allocator settings ask for expandable segments."""
    return any("expandable_segments:True" in os.environ.get(name, "") for name in _ALLOC_CONF)


@contextlib.contextmanager
def expandable_segments_off() -> Iterator[None]:
    """CUDA allocations inside come from ordinary segments (shareable by a plain CUDA IPC
    handle); the setting the environment asked for is restored after (verl's
    `set_expandable_segments`)."""
    settings = torch.cuda.memory._set_allocator_settings
    settings("expandable_segments:False")
    try:
        yield
    finally:
        if expandable_segments_requested():
            settings("expandable_segments:True")


def staging_buffer(nbytes: int, device: torch.device) -> tuple[torch.Tensor, BufferHandle]:
    """A byte buffer on `device` another process can open from the returned handle."""
    if device.type == "cuda":  # not yet run against vLLM's GPU build (CPU-only CI)
        from torch.multiprocessing.reductions import reduce_tensor

        with expandable_segments_off():
            buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
        return buffer, ("cuda", pickle.dumps(reduce_tensor(buffer)))
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else None  # memory, not disk
    fd, path = tempfile.mkstemp(prefix="graft-weights-", dir=directory)
    os.close(fd)
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8), (
        "file",
        path,
        nbytes,
    )


def unlink(handle: BufferHandle) -> None:
    """Remove a CPU buffer's file name (processes that opened it keep the memory)."""
    if handle[0] == "file":
        Path(handle[1]).unlink(missing_ok=True)


def open_buffer(handles: BufferHandles, device: torch.device) -> torch.Tensor:
    """(engine worker) The staging buffer of this worker's own `device`, opened from
    `handles`. A CUDA handle carries the sender's device index (argument 6 of torch's
    `rebuild_cuda_tensor`), which is rewritten to this process's index of the same GPU,
    as vLLM's IPC engine and OpenRLHF do."""
    key = device_key(device)
    if key not in handles:
        raise ValueError(
            f"no staging buffer for this engine worker's device {key} (buffers for "
            f"{sorted(handles)}): the engine's GPU must be the policy's"
        )
    handle = handles[key]
    if handle[0] == "cuda":
        rebuild, args = pickle.loads(handle[1])
        args = list(args)
        args[6] = device.index if device.index is not None else torch.cuda.current_device()
        return rebuild(*args)
    _, path, nbytes = handle
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)


def slot_view(buffer: torch.Tensor, slot: WeightSlot) -> torch.Tensor:
    """The tensor `slot` describes, as a view of `buffer`."""
    _, dtype, shape, offset = slot
    torch_dtype = getattr(torch, dtype)
    numel = int(np.prod(shape, dtype=np.int64))
    return buffer[offset : offset + numel * torch_dtype.itemsize].view(torch_dtype).view(shape)


class WeightStager:
    """A single-process policy's staging buffer: laid out once for a state dict, refilled
    with the tensors that changed since the last `stage`. `unlink()` removes the buffer's
    file name (CPU); processes that opened it keep the memory."""

    def __init__(
        self,
        state_dict: dict[str, torch.Tensor],
        dtype: torch.dtype | None = None,
        device: torch.device | None = None,
    ) -> None:
        """Lay out `state_dict` (floating tensors cast to `dtype` when given; tied
        tensors once, under their first name) in a new shared buffer on `device`."""
        self.slots: dict[str, WeightSlot] = {}
        self.layout = _layout(state_dict)
        seen: set[tuple] = set()
        offset = 0
        for name, tensor in state_dict.items():
            identity = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))
            if identity in seen:
                continue
            seen.add(identity)
            out = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
            dtype_name = str(out).removeprefix("torch.")
            self.slots[name] = (name, dtype_name, list(tensor.shape), offset)
            offset += aligned(tensor.numel() * out.itemsize)
        device = device or torch.device("cpu")
        self.buffer, handle = staging_buffer(max(offset, 1), device)
        self.handles: BufferHandles = {device_key(device): handle}
        self.versions: dict[str, tuple[int, int]] = {}
        # the file name goes at the first sync (`unlink`), at the latest when collected
        self.unlink = weakref.finalize(self, unlink, handle)

    def fits(self, state_dict: dict[str, torch.Tensor]) -> bool:
        """Whether `state_dict` has the names, shapes and dtypes this buffer was laid out for."""
        return _layout(state_dict) == self.layout

    def stage(self, state_dict: dict[str, torch.Tensor]) -> tuple[list[WeightSlot], int]:
        """Copy every group (`sync_group`) with a changed tensor into the buffer; return
        the slots copied and how many state-dict tensors were skipped (unchanged or tied)."""
        changed = {
            sync_group(name)
            for name in self.slots
            if tensor_version(state_dict[name]) != self.versions.get(name)
        }
        sent = []
        with torch.no_grad():
            for name, slot in self.slots.items():
                if sync_group(name) in changed:
                    slot_view(self.buffer, slot).copy_(state_dict[name])
                    self.versions[name] = tensor_version(state_dict[name])
                    sent.append(slot)
        return sent, len(state_dict) - len(sent)


def _layout(state_dict: dict[str, torch.Tensor]) -> list[tuple[str, torch.dtype, tuple]]:
    return [(name, t.dtype, tuple(t.shape)) for name, t in state_dict.items()]
