"""Which stored group a prompt gets when the library holds several that Eq.4 can take
(`library.choose`): the rule names, for the run config's schema, and the rule itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:  # the format module loads pyarrow; the config schema needs only the names
    from algorithms.library.format import LibraryGroup

LibraryChoice = Literal["most_recent", "highest_k", "model"]
CHOICES: tuple[str, ...] = get_args(LibraryChoice)


def _recency(group: LibraryGroup) -> tuple:
    """Later written first; then the later source step; then the group id (a total order)."""
    return (group.generated_at, -1 if group.step is None else group.step, group.group_id)


def choose_group(groups: Sequence[LibraryGroup], ks: Sequence[int], rule: str) -> int:
    """Which of a prompt's eligible groups (each with its re-verified k) is its peer group.

    'most_recent' (the default): the latest written, the least stale; 'highest_k': the
    most successes, then the latest; 'model': the latest (the groups are those of the
    named model already)."""
    if not groups:
        raise ValueError("choose_group needs at least one group")
    if rule not in CHOICES:
        raise ValueError(f"unknown choice {rule!r}; valid: {', '.join(CHOICES)}")
    if rule == "highest_k":
        return max(range(len(groups)), key=lambda j: (ks[j], _recency(groups[j])))
    return max(range(len(groups)), key=lambda j: _recency(groups[j]))
