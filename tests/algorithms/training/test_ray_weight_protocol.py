"""The bucketed sync's protocol: a bucket is never overwritten before its acknowledgement
says the engine's copies out of it are done.

A `LazyDevice` stands for the engine's GPU: the copies `load_weights` asks for are queued
and run only at `synchronize()` (or when the device gets to them, at the end), as CUDA
copies are. The sender is the real `weight_sync.sync_buckets` with one reused staging
buffer; the receiver is the real `engine.worker.receive_bucket`. Without the synchronize
before the acknowledgement (the engine side before this fix), later buckets' bytes land in
earlier buckets' parameters, which the second test shows the check catches.
"""

from __future__ import annotations

import pytest
import torch

from algorithms.training.ray.weight_sync import sync_buckets
from graft_env.policies.engine.llm import engine_environment
from graft_env.policies.engine.staging import device_key, open_buffer, staging_buffer, unlink
from graft_env.policies.engine.worker import receive_bucket

LIMIT = 3 * 2**10  # a 3 KiB bucket: each block below is 1.1 KiB in float32


class LazyDevice:
    """Queued copies, run at `synchronize`."""

    def __init__(self) -> None:
        self.queued: list[tuple[str, torch.Tensor]] = []
        self.received: dict[str, torch.Tensor] = {}

    def load_weights(self, tensors):
        self.queued.extend(tensors)  # the views, read later
        return [name for name, _ in tensors]

    def synchronize(self) -> None:
        for name, view in self.queued:
            self.received[name] = view.clone()
        self.queued.clear()


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.ModuleDict(
        {"layers": torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(6)])}
    )


def _sync(model: torch.nn.Module, synchronize_before_ack: bool) -> LazyDevice:
    device, buffers, order = LazyDevice(), [], []

    def staging(nbytes: int) -> torch.Tensor:
        buffers.append(torch.zeros(nbytes, dtype=torch.uint8))
        return buffers[0]

    def load(slots) -> None:
        order.append("load")
        sync = device.synchronize if synchronize_before_ack else (lambda: None)
        receive_bucket(buffers[0], slots, device.load_weights, sync, clone=False)

    stats = sync_buckets(
        model, torch.float32, LIMIT, owner=True, staging=staging, load=load,
        fence=lambda: order.append("fence"),
    )  # fmt: skip
    device.synchronize()  # the device runs whatever is still queued
    assert stats.buckets >= 3 and len(buffers) == 1  # several buckets through one buffer
    assert order == ["fence", "load", "fence"] * stats.buckets
    return device


def test_every_bucket_is_copied_out_before_the_buffer_is_refilled():
    model = _model()
    received = _sync(model, synchronize_before_ack=True).received
    expected = dict(model.named_parameters())
    assert received.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(received[name], tensor), name


def test_an_acknowledgement_before_the_copies_finish_lets_later_buckets_overwrite():
    model = _model()
    received = _sync(model, synchronize_before_ack=False).received
    wrong = [n for n, t in model.named_parameters() if not torch.equal(received[n], t)]
    assert wrong and "layers.0.weight" in wrong  # the first bucket holds the last one's bytes


def test_each_worker_opens_the_buffer_of_its_own_device_and_nothing_else():
    buffer, handle = staging_buffer(64, torch.device("cpu"))
    try:
        buffer.fill_(7)
        handles = {device_key(torch.device("cpu")): handle}
        assert torch.equal(open_buffer(handles, torch.device("cpu")), buffer)
        with pytest.raises(ValueError, match="no staging buffer for this engine worker's device"):
            open_buffer({"GPU-1234": ("cuda", b"")}, torch.device("cpu"))
    finally:
        unlink(handle)


def test_sleep_mode_engines_start_without_expandable_segments_and_on_their_gpus():
    environ = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True"}
    assert engine_environment(environ, "2,3", sleep_mode=True) == {
        "CUDA_VISIBLE_DEVICES": "2,3",
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128",
    }
    only = {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    assert engine_environment(only, None, sleep_mode=True) == {"PYTORCH_ALLOC_CONF": None}
    assert engine_environment(environ, None, sleep_mode=False) == {}
