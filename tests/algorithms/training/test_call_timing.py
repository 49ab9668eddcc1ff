"""A worker group's call split (`algorithms.training.ray.call_timing`): the union of
profiler intervals, the rounds and parts of `split`, and `profiled` on a one-rank gloo
group (the profiler sees a collective, and none where there is none)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

from algorithms.training.ray.call_timing import (
    PARTS,
    CallTime,
    RankTime,
    profiled,
    rounds,
    split,
    union_seconds,
)

spans = st.lists(
    st.tuples(st.floats(0, 100), st.floats(0, 10)).map(lambda p: (p[0], p[0] + p[1])),
    max_size=12,
)


@given(spans)
def test_union_lies_between_the_longest_span_and_the_sum(intervals):
    total = union_seconds(intervals)
    lengths = [end - start for start, end in intervals]
    assert max(lengths, default=0.0) <= total + 1e-9
    assert total <= sum(lengths) + 1e-9
    assert math.isclose(total, union_seconds(list(reversed(intervals))), abs_tol=1e-9)


def test_union_counts_nested_and_overlapping_spans_once():
    assert union_seconds([(0, 10), (2, 3), (8, 12), (20, 21)]) == 13


@st.composite
def calls(draw) -> CallTime:
    """A call whose every rank ran inside it, collectives and profiler within the rank."""
    method = draw(st.sampled_from(["generate", "score", "update"]))
    started = draw(st.floats(0, 50))
    wall = draw(st.floats(0.01, 5))
    ranks = []
    for _ in range(draw(st.integers(1, 3))):
        seconds = wall * draw(st.floats(0, 1))
        collectives, profiler = (seconds * f for f in draw(st.tuples(*[st.floats(0, 0.5)] * 2)))
        ranks.append(RankTime(seconds, collectives, profiler))
    return CallTime(method, started, started + wall, tuple(ranks))


@given(st.lists(calls(), min_size=1, max_size=8))
def test_split_parts_are_non_negative_and_add_up_to_the_driver_wall(drawn):
    table = split(drawn)
    assert set(table) == {call.method for call in drawn}
    for method, parts in table.items():
        assert set(parts) == set(PARTS)
        assert all(parts[part] >= -1e-9 for part in PARTS), parts
        rest = ("rank_collectives", "rank_compute", "rank_profiler", "driver_overhead")
        assert math.isclose(sum(parts[p] for p in rest), parts["driver_wall"], abs_tol=1e-9)
        mine = [call for call in drawn if call.method == method]
        assert parts["driver_wall"] <= sum(c.finished - c.started for c in mine) + 1e-9


def test_calls_in_flight_together_are_one_round_with_the_slowest_rank():
    fast, slow = RankTime(1.0, 0.2, 0.1), RankTime(3.0, 1.0, 0.5)
    first = CallTime("update", 0.0, 4.0, (fast, fast))
    second = CallTime("update", 0.1, 4.5, (slow, fast))  # waited for after the first
    later = CallTime("update", 10.0, 11.0, (fast,))
    assert rounds([later, second, first]) == [[first, second], [later]]
    parts = split([first, second, later])["update"]
    assert parts["driver_wall"] == pytest.approx(4.5 + 1.0)
    assert parts["rank_total"] == pytest.approx(3.0 + 1.0)
    assert parts["rank_collectives"] == pytest.approx(1.0 + 0.2)
    assert parts["rank_compute"] == pytest.approx(1.5 + 0.7)
    assert parts["driver_overhead"] == pytest.approx(1.5 + 0.0)


def test_profiled_sees_the_collectives_of_a_gloo_group(tmp_path):
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1
    )
    try:
        tensor = torch.ones(1 << 16)

        def reduce() -> float:
            for _ in range(20):
                dist.all_reduce(tensor)
            return float(tensor[0])

        value, times = profiled(reduce)
        _, quiet = profiled(lambda: torch.ones(256, 256) @ torch.ones(256, 256))
    finally:
        dist.destroy_process_group()
    assert value == 1.0
    assert 0 < times.collectives <= times.seconds - times.profiler
    assert times.profiler > 0
    assert quiet.collectives == 0 and quiet.seconds > quiet.profiler > 0
