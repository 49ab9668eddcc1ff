"""Turning an environment's `dataset` argument into a list of problems."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from graft_env.data import Problem, load


def resolve_problems(
    dataset: str | Sequence[Problem],
    split: str | None = None,
    data_dir: str | os.PathLike | None = None,
    dataset_options: Mapping[str, Any] | None = None,
) -> list[Problem]:
    """A registry name (loaded with `graft_env.data.load`) or an explicit problem list."""
    if isinstance(dataset, str):
        problems = load(dataset, split=split, data_dir=data_dir, **dict(dataset_options or {}))
    else:
        problems = list(dataset)
        bad = [i for i, p in enumerate(problems) if not isinstance(p, Problem)]
        if bad:
            raise TypeError(
                f"dataset must be a registry name or a sequence of graft_env.data.Problem; "
                f"item {bad[0]} is {type(problems[bad[0]]).__name__}"
            )
    if not problems:
        raise ValueError(f"dataset {dataset if isinstance(dataset, str) else '<list>'} is empty")
    return problems
