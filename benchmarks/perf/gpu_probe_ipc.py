"""`gpu_probes`' two-process probes: (a) a staging buffer shared over CUDA IPC, with and
without expandable segments, and (b) the bucketed weight sync's acknowledgement race.

(a) `share_buffer`: this process allocates a uint8 buffer (expandable segments switched per
case at run time, `torch.cuda.memory._set_allocator_settings`, as verl does around its
sync), fills it with a pattern and passes it through a `torch.multiprocessing` queue to a
spawned consumer (the tensor travels as a CUDA IPC handle, `torch.multiprocessing.reductions`;
with expandable segments torch exports the segment's memory as a file descriptor the
consumer fetches with `pidfd_getfd`, which unprivileged containers refuse). The consumer
opens it, compares every byte with the pattern and writes one byte back, which this side
must then see. On CPU the same code shares a shared-memory tensor (no CUDA IPC: the
consumer logic only); the expandable case is CUDA only.

(b) `ack_race`: the engine side of a bucketed sync copies bucket n out of the shared buffer
on its own stream and acknowledges; the trainer refills the buffer with bucket n+1 as soon
as the acknowledgement arrives. `ack_before_sync` acknowledges as soon as the copy is queued
(the engine's RPC returning without synchronizing), `sync_then_ack` synchronizes the stream
first (verl's worker). On CUDA the consumer's stream has `spin_ms` of queued work before each
copy (`torch.cuda._sleep`, standing in for a busy engine stream), and each bucket's copy is
compared byte by byte with what the bucket held. On CPU (`--smoke`) the same protocol runs
with two threads and `QueuedStream`, a stream whose queued copies run when it is
synchronized, and the consumer synchronizes after the trainer's next notice: the worst case
of the race, made deterministic, so every CPU run gives the same verdict.
"""

from __future__ import annotations

import pickle
import queue
import threading
import time
from multiprocessing.reduction import ForkingPickler
from typing import Any


def _pattern(torch: Any, nbytes: int, salt: int, device: str) -> Any:
    """Bytes (i * 31 + salt) mod 251: distinct per bucket, cheap to regenerate anywhere."""
    index = torch.arange(nbytes, device=device, dtype=torch.int32)
    return index.mul_(31).add_(salt).remainder_(251).to(torch.uint8)


def shareable(*objects: Any) -> bytes:
    """`objects` pickled as torch.multiprocessing sends them (a CUDA tensor as its IPC
    handle), here, so a tensor that cannot be shared raises in the producer's own thread
    rather than in a queue's feeder thread, which only prints it."""
    import torch.multiprocessing  # noqa: F401  (registers torch's reductions)

    return bytes(ForkingPickler.dumps(objects))


def _consume_shared(inbox: Any, outbox: Any) -> None:
    """The consumer of (a): open the shared tensor, compare it, write one byte back."""
    import torch

    try:
        payload = inbox.get(timeout=120)
        started = time.perf_counter()
        shared, salt = pickle.loads(payload)
        opened = time.perf_counter() - started
        device = str(shared.device)
        equal = bool(torch.equal(shared, _pattern(torch, shared.numel(), salt, device)))
        shared[0] = 255  # the pattern never holds 255
        if shared.is_cuda:
            torch.cuda.synchronize()
        outbox.put({"opened_s": opened, "bytes_equal": equal, "device": device})
        inbox.get(timeout=120)  # hold the mapping until the producer has looked
    except Exception as err:  # reported, not raised: the producer records it
        outbox.put({"error": f"{type(err).__name__}: {err}"})


def share_buffer(device: str, mib: int, expandable: bool | None, budget_s: float) -> dict:
    """(a): one buffer of `mib` MiB shared with a spawned consumer; `expandable` switches
    expandable segments for its allocation (None: the allocator as it is)."""
    import torch
    import torch.multiprocessing as mp

    cuda = device.startswith("cuda")
    if expandable is not None:
        torch.cuda.memory._set_allocator_settings(f"expandable_segments:{expandable}")
    try:
        buffer = _pattern(torch, mib << 20, 7, device)
    finally:
        if expandable is not None:
            torch.cuda.memory._set_allocator_settings("expandable_segments:False")
    label = "CUDA IPC" if cuda else "CPU shared memory (no CUDA IPC)"
    base = {"mib": mib, "expandable_segments": expandable, "path": label}
    try:
        payload = shareable(buffer, 7)
    except Exception as err:  # e.g. expandable segments refused for IPC: the finding
        return {**base, "error": f"sharing: {type(err).__name__}: {err}"}
    context = mp.get_context("spawn")
    inbox, outbox = context.Queue(), context.Queue()
    consumer = context.Process(target=_consume_shared, args=(inbox, outbox), daemon=True)
    consumer.start()
    try:
        inbox.put(payload)
        try:
            reply = outbox.get(timeout=budget_s)
        except queue.Empty:
            reply = {"error": f"no reply from the consumer in {budget_s:.0f} s"}
        if cuda:
            torch.cuda.synchronize()
        reply["write_back_seen"] = int(buffer[0]) == 255
        inbox.put("done")
    finally:
        consumer.join(timeout=30)
        if consumer.is_alive():
            consumer.kill()
    return {**base, **reply}


class QueuedStream:
    """A stream whose queued copies run only when it is synchronized (the CPU model of a
    device stream that has not reached them yet)."""

    def __init__(self) -> None:
        self.pending: list[tuple[Any, Any]] = []

    def copy(self, destination: Any, source: Any) -> None:
        self.pending.append((destination, source))

    def synchronize(self) -> None:
        for destination, source in self.pending:
            destination.copy_(source)
        self.pending.clear()


def _cpu_consumer(protocol: str, staging: Any, outs: list, notices: Any, acks: Any) -> None:
    stream = QueuedStream()
    while (bucket := notices.get()) is not None:
        if protocol == "ack_before_sync":
            stream.synchronize()  # the previous bucket's copy runs only now: too late
        stream.copy(outs[bucket], staging)
        if protocol == "sync_then_ack":
            stream.synchronize()
        acks.put(bucket)
    stream.synchronize()


def _cpu_race(protocol: str, buckets: int, nbytes: int) -> list[Any]:
    """(b) on CPU: the trainer thread refills `staging` after each acknowledgement."""
    import torch

    staging = torch.zeros(nbytes, dtype=torch.uint8)
    outs = [torch.zeros_like(staging) for _ in range(buckets)]
    notices: queue.Queue = queue.Queue()
    acks: queue.Queue = queue.Queue()
    engine = threading.Thread(target=_cpu_consumer, args=(protocol, staging, outs, notices, acks))
    engine.start()
    for bucket in range(buckets):
        staging.copy_(_pattern(torch, nbytes, bucket, "cpu"))
        notices.put(bucket)
        acks.get(timeout=60)
    notices.put(None)
    engine.join(timeout=60)
    return outs


def _spin_cycles_per_ms(torch: Any) -> float:
    """How many `torch.cuda._sleep` cycles take a millisecond here (timed with events)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    end.synchronize()
    return 1_000_000 / max(start.elapsed_time(end), 1e-3)


def _cuda_consumer(protocol: str, spin_ms: float, inbox: Any, outbox: Any) -> None:
    """The engine side of (b) on CUDA, in its own process: copy on its stream, acknowledge."""
    import torch

    try:
        staging, buckets = pickle.loads(inbox.get(timeout=120))
        outs = [torch.empty_like(staging) for _ in range(buckets)]
        stream = torch.cuda.Stream()
        cycles = int(spin_ms * _spin_cycles_per_ms(torch))
        for bucket in range(buckets):
            inbox.get(timeout=120)  # "bucket ready"
            with torch.cuda.stream(stream):
                torch.cuda._sleep(cycles)  # the engine stream's queued work
                outs[bucket].copy_(staging, non_blocking=True)
            if protocol == "sync_then_ack":
                stream.synchronize()
            outbox.put(bucket)
        stream.synchronize()
        wrong = [
            int((out != _pattern(torch, out.numel(), b, "cuda")).sum())
            for b, out in enumerate(outs)
        ]
        outbox.put({"wrong_bytes_per_bucket": wrong})
    except Exception as err:
        outbox.put({"error": f"{type(err).__name__}: {err}"})


def _cuda_race(protocol: str, buckets: int, nbytes: int, spin_ms: float, budget_s: float) -> dict:
    import torch
    import torch.multiprocessing as mp

    staging = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
    context = mp.get_context("spawn")
    inbox, outbox = context.Queue(), context.Queue()
    engine = context.Process(
        target=_cuda_consumer, args=(protocol, spin_ms, inbox, outbox), daemon=True
    )
    engine.start()
    deadline = time.perf_counter() + budget_s
    try:
        inbox.put(shareable(staging, buckets))
        for bucket in range(buckets):
            staging.copy_(_pattern(torch, nbytes, bucket, "cuda"))
            torch.cuda.synchronize()
            inbox.put(bucket)
            ack = outbox.get(timeout=max(1.0, deadline - time.perf_counter()))
            if isinstance(ack, dict):
                return ack
        return outbox.get(timeout=max(1.0, deadline - time.perf_counter()))
    finally:
        engine.join(timeout=30)
        if engine.is_alive():
            engine.kill()


def ack_race(device: str, buckets: int, mib: float, spin_ms: float, budget_s: float) -> dict:
    """(b) for both protocols: wrong bytes per bucket (0 everywhere: no race seen)."""
    import torch

    nbytes = int(mib * (1 << 20))
    results: dict[str, Any] = {"buckets": buckets, "bucket_bytes": nbytes}
    for protocol in ("ack_before_sync", "sync_then_ack"):
        started = time.perf_counter()
        if device.startswith("cuda"):
            record = _cuda_race(protocol, buckets, nbytes, spin_ms, budget_s / 2)
        else:
            outs = _cpu_race(protocol, buckets, nbytes)
            wrong = [
                int((out != _pattern(torch, nbytes, b, "cpu")).sum()) for b, out in enumerate(outs)
            ]
            record = {"wrong_bytes_per_bucket": wrong}
        record["seconds"] = time.perf_counter() - started
        if "wrong_bytes_per_bucket" in record:
            record["corrupted_buckets"] = sum(1 for w in record["wrong_bytes_per_bucket"] if w)
        results[protocol] = record
    results["model"] = (
        f"CUDA: consumer stream spins {spin_ms} ms before each copy"
        if device.startswith("cuda")
        else "CPU threads, QueuedStream (deterministic worst case; no device)"
    )
    return results
