"""Which rows of a minibatch run through the model together (the micro-batches).

A forward pads its rows' prompts to their longest and their responses to their longest
(`forward.pack_prompt_response`), so a micro-batch costs rows x (longest prompt +
longest response) token positions. Fixed row counts (`micro_batch_size`) in minibatch
order put a 4,096-token response next to 200-token ones: about 2.4-2.6x the real tokens
on the paper's length mix. `token_budget` instead sorts the rows by response length,
then prompt length, longest first, and fills each micro-batch while its padded size
stays within the budget (verl's `use_dynamic_bsz` balances the same sizes but removes
the padding): on that mix with 32 prompts x 8 responses of 80-200 prompt tokens
(tests/graft_env/policies/test_micro_batches.py, 20 draws) 1.06-1.10x the real tokens
under a 8,192-token budget, 1.09-1.15x (median 1.12) under 16,384, 1.15-1.25x under
32,768; sorting by total length instead of response length pads ~4 points more. What
padding is left is mostly the prompts'. Each micro-batch lists its rows in minibatch
order, and which rows form the minibatch (peer-last order, SPEC §5) is not touched:
only how the forwards are cut changes, never the loss's minibatch.

Padding-free forwards (the `padding_free` option, `policies.forward`) run a micro-batch's
real tokens only: `forward_tokens` is then their sum, and the budget fills with it.
"""

from __future__ import annotations

from collections.abc import Sequence


def fixed_size(rows: int, size: int | None) -> list[list[int]]:
    """Consecutive runs of `size` rows (all of them when None)."""
    size = size or rows
    return [list(range(start, min(start + size, rows))) for start in range(0, rows, size)]


def padded_size(
    group: Sequence[int], prompt_lens: Sequence[int], response_lens: Sequence[int]
) -> int:
    """Token positions of `group`'s forward: rows x (longest prompt + longest response)."""
    longest_prompt = max(prompt_lens[j] for j in group)
    longest_response = max(response_lens[j] for j in group)
    return len(group) * (longest_prompt + longest_response)


def forward_tokens(
    group: Sequence[int],
    prompt_lens: Sequence[int],
    response_lens: Sequence[int],
    padding_free: bool = False,
) -> int:
    """Token positions `group`'s forward runs: its real tokens when `padding_free`, else
    its `padded_size`."""
    if padding_free:
        return sum(prompt_lens[j] + response_lens[j] for j in group)
    return padded_size(group, prompt_lens, response_lens)


def token_budget(
    prompt_lens: Sequence[int],
    response_lens: Sequence[int],
    budget: int,
    where: str,
    padding_free: bool = False,
) -> list[list[int]]:
    """Rows grouped so each group's `forward_tokens` is at most `budget`, longest
    responses first.

    A row that alone exceeds the budget raises, naming it (`where` says whose rows).
    """
    if len(prompt_lens) != len(response_lens):
        raise ValueError(f"{where}: {len(prompt_lens)} prompts but {len(response_lens)} responses")
    order = sorted(range(len(prompt_lens)), key=lambda j: (-response_lens[j], -prompt_lens[j]))
    groups: list[list[int]] = []
    for j in order:
        if prompt_lens[j] + response_lens[j] > budget:
            raise ValueError(
                f"{where}: row {j} has {prompt_lens[j]} prompt + {response_lens[j]} response "
                f"tokens, over max_tokens_per_micro_batch={budget}"
            )
        if (
            groups
            and forward_tokens([*groups[-1], j], prompt_lens, response_lens, padding_free) <= budget
        ):
            groups[-1].append(j)
        else:
            groups.append([j])
    return [sorted(group) for group in groups]


def token_counts(
    groups: Sequence[Sequence[int]],
    prompt_lens: Sequence[int],
    response_lens: Sequence[int],
    padding_free: bool = False,
) -> tuple[int, int]:
    """(real tokens, positions run) over `groups`' forwards."""
    real = sum(prompt_lens[j] + response_lens[j] for group in groups for j in group)
    run = sum(forward_tokens(g, prompt_lens, response_lens, padding_free) for g in groups)
    return real, run


def micro_batches(
    prompt_lens: Sequence[int],
    response_lens: Sequence[int],
    *,
    size: int | None,
    budget: int | None,
    where: str,
    padding_free: bool = False,
) -> list[list[int]]:
    """`token_budget` groups when a budget is set, else `fixed_size` runs of `size` rows."""
    if budget is None:
        return fixed_size(len(prompt_lens), size)
    return token_budget(prompt_lens, response_lens, budget, where, padding_free)
