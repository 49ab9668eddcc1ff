"""How a worker group divides one call's rows among its ranks (pure functions, no torch).

- `generate`: prompts in fixed blocks of `per_block` prompts, block b sampled with its own
  seed `block_seed(seed, b)` by rank `b % world`. The blocks and their seeds do not depend
  on the number of ranks, so 1 and k ranks sample the same responses.
- `score`: contiguous row chunks, one per rank, sizes differing by at most one.
- `update`: the minibatch's micro-batches (`policies.micro_batches`, as one process forms
  them: `micro_batch_size` consecutive rows or rows grouped by length under a token
  budget) are split further until their number is a multiple of the ranks, then dealt out
  round-robin: every rank runs the same number of forwards, as FSDP's collectives need.
  Halving a micro-batch keeps it within the token budget; the rare merge (too few rows,
  below) can exceed it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np


def prompt_blocks(prompts: int, per_block: int) -> list[range]:
    """Consecutive blocks of at most `per_block` prompt indices covering `range(prompts)`."""
    if per_block < 1:
        raise ValueError(f"prompt_blocks: per_block must be >= 1, got {per_block}")
    return [range(start, min(start + per_block, prompts)) for start in range(0, prompts, per_block)]


def block_seed(seed: int, block: int) -> int:
    """The sampling seed of prompt block `block` of a call with seed `seed`."""
    return int(np.random.SeedSequence([seed, block]).generate_state(1, dtype=np.uint64)[0] >> 1)


def row_chunks(rows: int, world: int) -> list[range]:
    """`world` contiguous chunks of `range(rows)`, sizes differing by at most one."""
    if world < 1:
        raise ValueError(f"row_chunks: world must be >= 1, got {world}")
    base, extra = divmod(rows, world)
    bounds = np.cumsum([0] + [base + (r < extra) for r in range(world)])
    return [range(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds)]


def rank_spans(spans: Sequence[Sequence[int]], world: int, where: str) -> list[list[list[int]]]:
    """Per rank, its micro-batches (lists of row positions) of one minibatch.

    The span count becomes the smallest multiple of `world` not below it, by halving the
    largest span (most rows; the first of equals) again and again; when there are too few
    rows for that, the largest multiple of `world` the rows allow, by merging the last two
    spans (the one case that can exceed `micro_batch_size`). Span i then goes to rank
    i % world. A minibatch with fewer rows than ranks cannot give every rank a forward:
    ValueError naming `where`.
    """
    parts = [list(span) for span in spans if span]
    rows = sum(len(span) for span in parts)
    if rows < world:
        raise ValueError(f"{where}: {rows} row(s) cannot be split over {world} ranks")
    target = min(-(-len(parts) // world) * world, rows // world * world)
    while len(parts) > target:
        parts[-2:] = [parts[-2] + parts[-1]]
    while len(parts) < target:
        largest = max(range(len(parts)), key=lambda i: len(parts[i]))
        span = parts[largest]
        half = (len(span) + 1) // 2
        parts[largest : largest + 1] = [span[:half], span[half:]]
    return [parts[rank::world] for rank in range(world)]
