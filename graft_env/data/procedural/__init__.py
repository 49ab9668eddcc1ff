"""Procedural arithmetic tasks: the built-in dataset for fast tests and tiny models.

`generate(skill, index, seed=, split=, difficulty=)` is a pure function of its
arguments: the item's random stream is seeded with a string of them (Python's
string seeding hashes with SHA-512, so it is the same in every process; `hash()`
is not). The splits are disjoint by construction, not by luck: each question belongs
to exactly one split by a CRC-32 of its text, and a generator redraws until its
item belongs to the requested split. Small levels have small item spaces (a few
hundred level-1 questions per skill), where independent streams would overlap.

Three splits, as in a real pipeline: "sft" (two in five questions) is what a
model is warm-started on (the tiny pair's supervised data), "train" (two in five)
is the RL prompt pool, "test" (one in five) is held out for evaluation. RL on
questions the warm start already memorised would measure recall, not learning.

`load("procedural", split, skills=[...], size=N, seed=s, difficulty=d)` gives N
items per skill, interleaved round-robin (item 0 of every skill, then item 1, ...).
`difficulty` is a level 1-5, a list of levels drawn uniformly per item, or None for
the graded mix: levels drawn with weights 5:4:3:2:1, so most items are easy.
`families=[...]` (`families.FAMILIES`: "borrow", "carry", "long_gcd") keeps, for each
chosen skill with a listed family, only that family's items: item i is then the i-th
index whose item is in the family (the gap study's prompts and held-out sets). At least
one listed family must belong to a chosen skill.

Modules:

families          item families (borrow, carry, long gcd): sub-procedures as pure predicates
skills            the procedural skills: each draws one item at a level from 1 to 5
"""

from __future__ import annotations

import os
import random
import zlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from graft_env.data.problem import DatasetError, Problem
from graft_env.data.procedural.families import FAMILIES, check_family, in_family
from graft_env.data.procedural.skills import SKILL_SPECS
from graft_env.data.registry import register_dataset

SKILLS: tuple[str, ...] = tuple(SKILL_SPECS)
LEVELS = (1, 2, 3, 4, 5)
SPLITS = ("sft", "train", "test")
DEFAULT_SIZE = {"sft": 2000, "train": 2000, "test": 200}  # items per skill
_MIX_WEIGHTS = (5, 4, 3, 2, 1)
_SPLIT_OF_RESIDUE = ("test", "sft", "sft", "train", "train")  # by CRC-32 mod 5
_MAX_DRAWS = 1000  # a split holds >= 1/5 of every level's items; 1000 misses ~never

Difficulty = int | Sequence[int] | None
T = TypeVar("T")


def split_of(question: str) -> str:
    """The split a question belongs to, whatever seed or index produced it."""
    residue = zlib.crc32(question.encode("utf-8")) % len(_SPLIT_OF_RESIDUE)
    return _SPLIT_OF_RESIDUE[residue]


def answer_range(skill: str, difficulty: int) -> tuple[int, int]:
    """Inclusive (low, high) range of `skill`'s answers at level `difficulty`."""
    _check_skill(skill)
    return SKILL_SPECS[skill].answer_range(_check_levels(difficulty)[0])


def generate(
    skill: str,
    index: int,
    *,
    seed: int = 0,
    split: str = "train",
    difficulty: Difficulty = None,
) -> Problem:
    """Item `index` of `skill` for (`seed`, `split`): same arguments, same Problem.

    `extra` holds the skill, the level used and the worked solution, whose last
    `\\boxed{}` is the answer.
    """
    _check_skill(skill)
    if split not in SPLITS:
        raise DatasetError(f"procedural split must be one of {list(SPLITS)}, got {split!r}")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise DatasetError(f"procedural index must be a non-negative integer, got {index!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DatasetError(f"procedural seed must be an integer, got {seed!r}")
    rng = random.Random(f"graft-procedural/{split}/{seed}/{skill}/{index}")
    if difficulty is None:
        level = rng.choices(LEVELS, weights=_MIX_WEIGHTS)[0]
    else:
        level = rng.choice(_check_levels(difficulty))
    make = SKILL_SPECS[skill].make
    for _ in range(_MAX_DRAWS):
        item = make(rng, level)
        if split_of(item.question) == split:
            break
    else:
        raise RuntimeError(f"{skill} level {level}: no {split} item in {_MAX_DRAWS} draws")
    return Problem(
        id=f"procedural/{split}/{skill}/{seed}/{index}",
        problem=item.question,
        answer=str(item.answer),
        dataset="procedural",
        extra={"skill": skill, "difficulty": level, "solution": item.solution},
    )


@register_dataset("procedural", splits=SPLITS, default_split="train")
def load_procedural(
    split: str,
    data_dir: str | os.PathLike[str] | None = None,  # unused: items are generated
    skills: Sequence[str] | None = None,
    size: int | None = None,
    seed: int = 0,
    difficulty: Difficulty = None,
    families: Sequence[str] | None = None,
) -> list[Problem]:
    """`size` items per skill (default 2000 train / 200 test), skills interleaved; with
    `families`, a skill's items are those of its listed families only."""
    chosen = _option("skills", _chosen_skills, skills)
    count = DEFAULT_SIZE[split] if size is None else size
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        message = f"size must be a positive integer (items per skill), got {count!r}"
        raise DatasetError(message, option="size")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DatasetError(f"seed must be an integer, got {seed!r}", option="seed")
    if difficulty is not None:
        _option("difficulty", _check_levels, difficulty)
    if families is not None:
        names = _option("families", _family_names, families, chosen)
        return _family_items(chosen, names, count, seed, split, difficulty)
    return [
        generate(skill, index, seed=seed, split=split, difficulty=difficulty)
        for index in range(count)
        for skill in chosen
    ]


def _family_items(
    chosen: list[str], names: list[str], count: int, seed: int, split: str, difficulty: Difficulty
) -> list[Problem]:
    """`count` items per skill, interleaved; a skill with listed families keeps only the
    items in one of them (scanning indices 0, 1, ...)."""
    columns = []
    for skill in chosen:
        mine = [n for n in names if FAMILIES[n].skill == skill]
        items, index = [], 0
        while len(items) < count:
            if index >= _MAX_DRAWS * count:
                raise DatasetError(f"{skill}: fewer than {count} items of {mine} in {split}")
            problem = generate(skill, index, seed=seed, split=split, difficulty=difficulty)
            if not mine or any(in_family(n, problem) for n in mine):
                items.append(problem)
            index += 1
        columns.append(items)
    return [column[i] for i in range(count) for column in columns]


def _option(name: str, check: Callable[..., T], *args: Any) -> T:
    """`check(*args)`, its DatasetError marked as one of loader option `name`."""
    try:
        return check(*args)
    except DatasetError as error:
        raise DatasetError(str(error), option=name) from None


def _chosen_skills(skills: Sequence[str] | None) -> list[str]:
    if isinstance(skills, str):
        raise DatasetError(f"skills must be a list of skill names, got the string {skills!r}")
    chosen = list(SKILLS if skills is None else skills)
    if not chosen:
        raise DatasetError("skills must name at least one skill")
    for skill in chosen:
        _check_skill(skill)
    if len(set(chosen)) != len(chosen):
        raise DatasetError(f"skills must not repeat a skill, got {chosen}")
    return chosen


def _family_names(families: Sequence[str], chosen: list[str]) -> list[str]:
    if isinstance(families, str) or not families:
        message = f"families must be a non-empty list of family names, got {families!r}"
        raise DatasetError(message)
    names = list(families)
    for name in names:
        check_family(name)
    if not any(FAMILIES[n].skill in chosen for n in names):
        raise DatasetError(f"families {names}: none is a family of the skills {chosen}")
    return names


def _check_skill(skill: str) -> None:
    if skill not in SKILL_SPECS:
        raise DatasetError(f"unknown procedural skill {skill!r}; valid skills: {list(SKILLS)}")


def _check_levels(difficulty: int | Sequence[int]) -> tuple[int, ...]:
    """The levels `difficulty` allows, sorted; raises unless all are in 1..5."""
    if isinstance(difficulty, int):
        levels = [difficulty]
    elif isinstance(difficulty, Sequence) and not isinstance(difficulty, str):
        levels = list(difficulty)
    else:
        levels = []
    if not levels or any(
        isinstance(level, bool) or not isinstance(level, int) or level not in LEVELS
        for level in levels
    ):
        raise DatasetError(
            f"difficulty must be a level in {list(LEVELS)}, a non-empty list of them, "
            f"or None for the graded mix; got {difficulty!r}"
        )
    return tuple(sorted(set(levels)))
