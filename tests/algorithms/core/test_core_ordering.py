"""Minibatch ordering (peer-last, §4.2 of the paper, and its variants)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.core import order_minibatches

SETTINGS = settings(max_examples=100, deadline=None)
# Draw the length first: plain st.lists favours very short lists, which rarely
# leave a remainder of 2 or more when cut into chunks.
peer_flags = st.integers(0, 40).flatmap(
    lambda size: st.lists(st.booleans(), min_size=size, max_size=size)
)
minibatch_counts = st.integers(1, 12)


@SETTINGS
@given(
    flags=peer_flags,
    count=minibatch_counts,
    mode=st.sampled_from(["peer_last", "peer_first", "random"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_group_once_in_near_equal_nonempty_chunks(
    flags: list[bool], count: int, mode: str, seed: int
) -> None:
    minibatches = order_minibatches(flags, count, mode, rng=np.random.default_rng(seed))
    flat = [i for minibatch in minibatches for i in minibatch]
    assert sorted(flat) == list(range(len(flags)))
    assert len(minibatches) == min(count, len(flags))
    sizes = [len(minibatch) for minibatch in minibatches]
    assert all(size >= 1 for size in sizes)
    assert not sizes or max(sizes) - min(sizes) <= 1


@SETTINGS
@given(flags=peer_flags, count=minibatch_counts)
def test_peer_last_runs_own_groups_first_in_their_original_order(
    flags: list[bool], count: int
) -> None:
    flat = [i for minibatch in order_minibatches(flags, count) for i in minibatch]
    own = [i for i, peer in enumerate(flags) if not peer]
    peer = [i for i, peer in enumerate(flags) if peer]
    assert flat == own + peer


@SETTINGS
@given(flags=peer_flags, count=minibatch_counts)
def test_peer_first_is_the_reverse_arrangement(flags: list[bool], count: int) -> None:
    flat = [i for minibatch in order_minibatches(flags, count, "peer_first") for i in minibatch]
    own = [i for i, peer in enumerate(flags) if not peer]
    peer = [i for i, peer in enumerate(flags) if peer]
    assert flat == peer + own


def test_worked_peer_last_example() -> None:
    # Groups 1 and 3 hold transferred data; 7 groups into 3 minibatches of 3, 2, 2.
    flags = [False, True, False, True, False, False, False]
    assert order_minibatches(flags, 3) == [[0, 2, 4], [5, 6], [1, 3]]
    assert order_minibatches(flags, 3, "peer_first") == [[1, 3, 0], [2, 4], [5, 6]]


def test_chunk_sizes_spread_the_remainder_one_each() -> None:
    sizes = [len(minibatch) for minibatch in order_minibatches([False] * 11, 4)]
    assert sizes == [3, 3, 3, 2]
    assert [len(minibatch) for minibatch in order_minibatches([True] * 3, 8)] == [1, 1, 1]


def test_random_order_is_reproducible_and_covers_permutations() -> None:
    flags = [False, True, False]
    first = order_minibatches(flags, 1, "random", rng=np.random.default_rng(5))
    assert first == order_minibatches(flags, 1, "random", rng=np.random.default_rng(5))
    rng = np.random.default_rng(0)
    seen = {tuple(order_minibatches(flags, 1, "random", rng=rng)[0]) for _ in range(200)}
    assert len(seen) == 6


def test_empty_batch_gives_no_minibatches() -> None:
    assert order_minibatches([], 4) == []


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (([False], 1, "random"), {}, ValueError, "mode='random' needs rng"),
        (([False], 1, "sorted"), {}, ValueError, "mode must be one of"),
        (([False], 0), {}, ValueError, "num_minibatches must be >= 1"),
        (([False], 2.0), {}, TypeError, "num_minibatches must be an integer"),
        (([False], 1, "random"), {"rng": 3}, TypeError, "numpy.random.Generator"),
    ],
)
def test_bad_options_are_rejected(args, kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        order_minibatches(*args, **kwargs)
