"""A seed and `max_new_tokens` at which a tiny-pair step transfers both cut and ended
responses, chosen from the pair's own samples, so it holds for any build of the pair.

At a cap c every response is its uncapped draw cut to c tokens: the sampler draws one
uniform per active row per token and drops finished rows at the same steps whatever the
cap (the step's 6 x 4 rows are one generation batch), so the draws before the cap are the
same. A response of L <= c tokens is unchanged and stops; one of L = c + 1 loses only its
EOS, which decoding drops, so its text and reward are unchanged. With c = L_max - 1, the
longest transferred response at an uncapped step, every transferred group keeps its
rewards and still moves (only a receiver's responses longer than L_max are cut deeper):
its responses of L_max tokens are cut and the shorter ones stop.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from algorithms.training.step import StepRecord

UNCAPPED = 64  # no tiny-pair response seen at level 1 reaches it (the longest was 58)
SEEDS = range(12)


def cutting_cap(record: StepRecord, receivers: Collection[str]) -> int | None:
    """L_max - 1 over the responses `receivers` got, if they stopped at two lengths or more."""
    lengths = set()
    for receiver in receivers:
        for group in record.transfers[receiver]:
            source = record.rollouts[group.source]
            for i in group.response_indices:
                if source.finish_reasons[group.prompt_index][i] != "stop":
                    return None
                lengths.add(len(source.token_ids[group.prompt_index][i]))
    return max(lengths) - 1 if len(lengths) >= 2 else None


def seed_and_cap(
    step: Callable[[int, int], StepRecord], receivers: Collection[str]
) -> tuple[int, int]:
    """The first seed whose uncapped `step(seed, UNCAPPED)` has a `cutting_cap`, and that cap."""
    for seed in SEEDS:
        cap = cutting_cap(step(seed, UNCAPPED), receivers)
        if cap is not None:
            return seed, cap
    raise AssertionError(
        f"no seed in {SEEDS} transferred responses of two lengths to {sorted(receivers)}"
    )
