"""Item families: the sub-procedures inside a skill, as pure predicates on items.

A family is the items of one skill whose worked solution needs one sub-procedure: a
borrow in subtraction, a carry in addition, three or more Euclid divisions in gcd.
The gap pair (issue 29) keeps a model from one family entirely while its peer learns
it. Each predicate reads the operands from the question text, so it applies to any
generated `Problem` (or bare question), whatever seed, split or level made it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from graft_env.data.problem import DatasetError, Problem


def digit_columns(a: int, b: int) -> list[tuple[int, int]]:
    """The (digit of a, digit of b) pairs of each column, units first; missing digits 0."""
    a_digits, b_digits = str(abs(a))[::-1], str(abs(b))[::-1]
    width = max(len(a_digits), len(b_digits))
    a_digits, b_digits = a_digits.ljust(width, "0"), b_digits.ljust(width, "0")
    return [(int(x), int(y)) for x, y in zip(a_digits, b_digits, strict=True)]


def carries(a: int, b: int) -> bool:
    """Whether column addition of non-negative a + b carries in any column (the last included).
    Until the first carry no column has one coming in, so that is a column whose digits sum
    to 10 or more."""
    return any(x + y >= 10 for x, y in digit_columns(a, b))


def borrows(a: int, b: int) -> bool:
    """Whether column subtraction of the smaller of a, b from the larger borrows in any column
    (the skill's solution subtracts that way round and negates when a < b). Until the first
    borrow none comes in, so that is a column whose top digit is below the bottom one."""
    return any(x < y for x, y in digit_columns(max(a, b), min(a, b)))


def euclid_divisions(a: int, b: int) -> int:
    """How many division lines Euclid's algorithm writes for gcd(a, b), a, b >= 1: one per
    division, the last with remainder 0 (the skill's solution has exactly these lines)."""
    larger, smaller = max(a, b), min(a, b)
    count = 0
    while smaller:
        larger, smaller = smaller, larger % smaller
        count += 1
    return count


LONG_GCD_DIVISIONS = 3  # "long_gcd": gcd items whose Euclid needs at least this many lines

_ADDITION = re.compile(r"Compute (-?\d+) \+ (-?\d+)\.")
_SUBTRACTION = re.compile(r"Compute (-?\d+) - (-?\d+)\.")
_GCD = re.compile(r"Compute gcd\((\d+), (\d+)\)\.")


@dataclass(frozen=True)
class Family:
    """One sub-procedure of one skill: `test` says whether an item's operands need it."""

    skill: str
    pattern: re.Pattern[str]
    test: Callable[[int, int], bool]
    description: str


FAMILIES: dict[str, Family] = {
    "borrow": Family("subtraction", _SUBTRACTION, borrows, "subtraction with a borrow"),
    "carry": Family("addition", _ADDITION, carries, "addition with a carry"),
    "long_gcd": Family(
        "gcd",
        _GCD,
        lambda a, b: euclid_divisions(a, b) >= LONG_GCD_DIVISIONS,
        f"gcd needing {LONG_GCD_DIVISIONS}+ Euclid divisions",
    ),
}


def check_family(name: str) -> Family:
    """The family called `name`; a one-line error naming the valid ones otherwise."""
    if name not in FAMILIES:
        raise DatasetError(f"unknown item family {name!r}; valid families: {list(FAMILIES)}")
    return FAMILIES[name]


def in_family(name: str, item: Problem | str) -> bool:
    """Whether `item` (a Problem or its question) belongs to family `name`. An item of
    another skill belongs to no family but its skill's; a question of the family's skill
    that does not parse is an error, not a silent False."""
    family = check_family(name)
    if isinstance(item, Problem):
        skill = item.extra.get("skill")
        if skill is not None and skill != family.skill:
            return False
        question = item.problem
    else:
        question = item
    match = family.pattern.fullmatch(question.strip())
    if match is None:
        if isinstance(item, Problem) and item.extra.get("skill") == family.skill:
            raise DatasetError(f"family {name!r}: cannot read the operands of {question!r}")
        return False
    return bool(family.test(int(match.group(1)), int(match.group(2))))


def family_of(item: Problem, families: tuple[str, ...]) -> str | None:
    """The first of `families` that `item` belongs to, else None."""
    return next((name for name in families if in_family(name, item)), None)
