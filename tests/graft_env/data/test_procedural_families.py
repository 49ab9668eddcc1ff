"""Item families (borrow, carry, long gcd): pure predicates, checked against arithmetic and
against the worked solutions the skills write; the `families` option of the dataset."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graft_env.data import DatasetError, load
from graft_env.data.procedural import SPLITS, generate
from graft_env.data.procedural.families import (
    FAMILIES,
    LONG_GCD_DIVISIONS,
    borrows,
    carries,
    euclid_divisions,
    in_family,
)


def digit_sum(number: int) -> int:
    return sum(int(d) for d in str(number))


@given(st.integers(0, 10**8), st.integers(0, 10**8))
def test_carries_iff_digit_sums_lose_nine(a: int, b: int) -> None:
    # each carry turns 10 in one column into 1 in the next: s(a) + s(b) - s(a + b) = 9 * carries
    assert carries(a, b) == (digit_sum(a) + digit_sum(b) != digit_sum(a + b))


@given(st.integers(0, 10**8), st.integers(0, 10**8))
def test_borrows_iff_adding_back_carries(a: int, b: int) -> None:
    top, bottom = max(a, b), min(a, b)
    assert borrows(a, b) == borrows(b, a) == carries(top - bottom, bottom)


@given(st.integers(1, 10**6), st.integers(1, 10**6))
def test_euclid_divisions_count_the_remainders_to_zero(a: int, b: int) -> None:
    larger, smaller = max(a, b), min(a, b)
    remainders = [larger, smaller]
    while remainders[-1]:
        remainders.append(remainders[-2] % remainders[-1])
    assert euclid_divisions(a, b) == len(remainders) - 2


_ITEMS = {
    "index": st.integers(0, 10**6),
    "seed": st.integers(0, 10**4),
    "split": st.sampled_from(SPLITS),
    "level": st.integers(1, 5),
}


@settings(max_examples=200)
@given(**_ITEMS)
def test_borrow_and_carry_match_the_worked_solution(index, seed, split, level) -> None:
    sub = generate("subtraction", index, seed=seed, split=split, difficulty=level)
    assert in_family("borrow", sub) == ("borrow 1" in sub.extra["solution"])
    add = generate("addition", index, seed=seed, split=split, difficulty=level)
    lines = add.extra["solution"].splitlines()
    last_column_total = int(lines[-2].split("write ")[-1])
    visible = "carry 1" in add.extra["solution"] or last_column_total >= 10
    assert in_family("carry", add) == visible


@settings(max_examples=200)
@given(**_ITEMS)
def test_long_gcd_matches_the_solution_lines(index, seed, split, level) -> None:
    item = generate("gcd", index, seed=seed, split=split, difficulty=level)
    divisions = len(item.extra["solution"].splitlines()) - 1  # the last line is the answer
    assert in_family("long_gcd", item) == (divisions >= LONG_GCD_DIVISIONS)


def test_a_family_holds_only_its_skill_and_both_kinds_occur() -> None:
    for name, family in FAMILIES.items():
        other = generate("multiplication", 0)
        assert not in_family(name, other)
        verdicts = {in_family(name, generate(family.skill, i, difficulty=1)) for i in range(200)}
        assert verdicts == {True, False}, name


def test_unknown_family_and_unreadable_item_are_errors() -> None:
    with pytest.raises(DatasetError, match=r"unknown item family 'borow'.*valid families"):
        in_family("borow", "Compute 3 - 1.")
    item = generate("subtraction", 0)
    broken = type(item)(**{**item.__dict__, "problem": "Compute three - one."})
    with pytest.raises(DatasetError, match="cannot read the operands"):
        in_family("borrow", broken)


def test_load_keeps_only_the_listed_families() -> None:
    items = load(
        "procedural", "test", skills=["addition", "subtraction", "gcd"],
        families=["carry", "borrow"], size=30, difficulty=1,
    )  # fmt: skip
    assert [p.extra["skill"] for p in items[:3]] == ["addition", "subtraction", "gcd"]
    assert all(in_family("carry", p) for p in items if p.extra["skill"] == "addition")
    assert all(in_family("borrow", p) for p in items if p.extra["skill"] == "subtraction")
    assert len([p for p in items if p.extra["skill"] == "gcd"]) == 30  # no family: whole
    again = load("procedural", "test", skills=["subtraction"], families=["borrow"], size=30)
    assert [p.id for p in again] == [p.id for p in load(
        "procedural", "test", skills=["subtraction"], families=["borrow"], size=30
    )]  # fmt: skip


def test_load_refuses_families_of_no_chosen_skill() -> None:
    with pytest.raises(DatasetError, match=r"families \['carry'\]: none is a family"):
        load("procedural", "test", skills=["gcd"], families=["carry"], size=2)
    with pytest.raises(DatasetError, match="unknown item family"):
        load("procedural", "test", skills=["gcd"], families=["gcdd"], size=2)
