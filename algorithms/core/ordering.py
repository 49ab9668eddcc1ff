"""Minibatch order within an optimisation epoch (GRAFT-SPEC §5 peer-last, §7 variants)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from algorithms.core._checks import check_int, check_rng

ORDER_MODES = ("peer_last", "peer_first", "random")


def order_minibatches(
    group_is_peer: Sequence[bool],
    num_minibatches: int,
    mode: str = "peer_last",
    rng: np.random.Generator | None = None,
) -> list[list[int]]:
    """Split units into minibatches in the order they must run.

    A unit (index = position in `group_is_peer`) is never split across minibatches;
    `Algorithm.build_batches` makes one unit per prompt, holding all of that
    prompt's rows. peer_last puts own units first and units holding transferred
    data last (each keeping its original order): the
    first minibatches are on-policy (ρ ≡ 1), and by the time peer data runs the
    ratios have moved, so clipping can limit its influence. peer_first is the
    reverse; random is a uniform shuffle drawn from `rng`.

    The ordered groups are cut into min(num_minibatches, groups) contiguous chunks
    whose sizes differ by at most one (larger chunks first) [project choice], so
    no minibatch is empty.
    """
    is_peer = [bool(flag) for flag in group_is_peer]
    num_minibatches = check_int(num_minibatches, "num_minibatches", minimum=1)
    if mode == "peer_last":
        order = [i for i, peer in enumerate(is_peer) if not peer]
        order += [i for i, peer in enumerate(is_peer) if peer]
    elif mode == "peer_first":
        order = [i for i, peer in enumerate(is_peer) if peer]
        order += [i for i, peer in enumerate(is_peer) if not peer]
    elif mode == "random":
        if rng is None:
            raise ValueError("mode='random' needs rng (a numpy.random.Generator)")
        order = [int(i) for i in check_rng(rng).permutation(len(is_peer))]
    else:
        raise ValueError(f"mode must be one of {ORDER_MODES}, got {mode!r}")

    num_chunks = min(num_minibatches, len(order))
    base, extra = divmod(len(order), num_chunks) if num_chunks else (0, 0)
    minibatches = []
    start = 0
    for chunk in range(num_chunks):
        size = base + (1 if chunk < extra else 0)
        minibatches.append(order[start : start + size])
        start += size
    return minibatches
