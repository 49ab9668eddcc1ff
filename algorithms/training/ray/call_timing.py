"""Where a worker group's calls spend their time: the ranks' collectives and compute, and
the driver's overhead around them (`benchmarks/perf/worker_group.py --split`).

Off unless asked for (`GroupPolicy.time_calls`; nothing changes when off). Then every call
reaches a rank as `RankWorker.timed(method, *args)`, which runs the method under
`torch.profiler` (`profiled`) and answers its `RankTime` with its result, and the driver
notes when the call started (before any `ray.put` of its arguments) and when it had the
merged answer (`CallTime`). `split` divides a method's calls into:

- rank collectives: the seconds of the slowest rank's call with a torch.distributed
  collective in flight, the union of the profiler's `c10d::*` ops (issued on the rank's
  thread: FSDP2's all-gathers and reduce-scatters, `sharded_update`'s all_gather and
  all_reduce) and `gloo:*` / `nccl:*` ops (run on the backend's threads; gloo runs a
  reduce-scatter as `gloo:all_reduce`). Compute that a prefetched all-gather overlaps
  counts as collective time;
- rank profiler: that rank's profiler start, stop and event reading (the price of asking);
- rank compute: the rest of that rank's call;
- driver overhead: the driver's wall time of the call minus that rank's whole call: the
  fan-out, the object store's copies (arguments in, answers out), the scatter of rows and
  the merge of the answers.

Calls of one method in flight together (the agents' `generate` or `update`, all submitted
before any is waited for) form one round: its wall runs from the first start to the last
answer and its slowest rank is the slowest of all their ranks. A method's figures are the
sums over its rounds, so the parts add up to its driver wall.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

COLLECTIVE_PREFIXES = ("c10d::", "gloo:", "nccl:")
"""Profiler event names of torch.distributed collectives (torch 2.13, CPU activities)."""
PARTS = (
    "driver_wall",
    "rank_total",
    "rank_collectives",
    "rank_compute",
    "rank_profiler",
    "driver_overhead",
)
"""What `split` reports per method; the last four add up to `driver_wall`."""
T = TypeVar("T")


@dataclass(frozen=True)
class RankTime:
    """One rank's call: its whole seconds, and of those the seconds with a collective in
    flight and the seconds the profiler itself took."""

    seconds: float
    collectives: float
    profiler: float


@dataclass(frozen=True)
class CallTime:
    """One call as the driver saw it (perf_counter seconds) and its ranks' `RankTime`s."""

    method: str
    started: float
    finished: float
    ranks: tuple[RankTime, ...]


def union_seconds(spans: Iterable[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals (nested or overlapping counted once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def profiled(fn: Callable[[], T]) -> tuple[T, RankTime]:
    """`fn()` under the CPU profiler: its value and its `RankTime`."""
    started = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        ran = time.perf_counter()
        value = fn()
        done = time.perf_counter()
    # The raw kineto events: `profile.events()` builds Python FunctionEvents first, 2 s for
    # the 12,500 events of a tiny model's 4 forward-backwards against 0.04 s for these.
    spans = [
        (event.start_ns(), event.end_ns())
        for event in profile.profiler.kineto_results.events()
        if event.name().startswith(COLLECTIVE_PREFIXES)
    ]
    seconds = time.perf_counter() - started
    return value, RankTime(seconds, union_seconds(spans) / 1e9, seconds - (done - ran))


def rounds(calls: Sequence[CallTime]) -> list[list[CallTime]]:
    """`calls` grouped into rounds: runs of calls whose driver times overlap."""
    grouped: list[list[CallTime]] = []
    for call in sorted(calls, key=lambda c: c.started):
        if grouped and call.started < max(c.finished for c in grouped[-1]):
            grouped[-1].append(call)
        else:
            grouped.append([call])
    return grouped


def round_split(calls: Sequence[CallTime]) -> dict[str, float]:
    """One round's `PARTS`, from its wall time and its slowest rank."""
    wall = max(c.finished for c in calls) - min(c.started for c in calls)
    slowest = max((rank for call in calls for rank in call.ranks), key=lambda r: r.seconds)
    return {
        "driver_wall": wall,
        "rank_total": slowest.seconds,
        "rank_collectives": slowest.collectives,
        "rank_compute": slowest.seconds - slowest.collectives - slowest.profiler,
        "rank_profiler": slowest.profiler,
        "driver_overhead": wall - slowest.seconds,
    }


def split(calls: Sequence[CallTime]) -> dict[str, dict[str, float]]:
    """Per method, its `PARTS` summed over its rounds."""
    by_method: dict[str, list[CallTime]] = defaultdict(list)
    for call in calls:
        by_method[call.method].append(call)
    out = {}
    for method, mine in by_method.items():
        parts = [round_split(r) for r in rounds(mine)]
        out[method] = {part: sum(p[part] for p in parts) for part in PARTS}
    return out
