"""The one record every dataset loader returns, and the error they raise.

Benchmarks disagree on field names (`problem` vs `question`), on how the gold answer
is written (a field, a `\\boxed{}` inside a solution, text after `####`) and on ids.
Loaders hide that: everything downstream (environments, rewards, the trajectory
store) sees only `Problem`, so a new dataset is one loader, not a change elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class DatasetError(ValueError):
    """A dataset could not be loaded as asked: unknown name or split, a missing
    directory or file, or a malformed row. The message says what and where (file
    and line number for rows), so a user can fix the data without reading code.
    `option` names the loader option whose value was wrong, where one was (a run config
    then reports it at `env.dataset_options.<option>`)."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class Problem:
    """One math problem with its gold final answer.

    `id` is stable and unique within its dataset, so prompt order and stored peer
    trajectories can refer to it across runs. `answer` is the bare final answer
    (no `\\boxed` wrapper), compared by the verifier. `extra` keeps every other field
    of the source row (solution, level, subject, url, the raw answer, ...); treat it
    as read-only. It is a plain dict so a `Problem` pickles across worker processes,
    and it is left out of the hash so problems can sit in sets.
    """

    id: str
    problem: str
    answer: str
    dataset: str
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for name in ("id", "problem", "answer", "dataset"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(
                    f"Problem.{name} must be a non-empty string, got {value!r} "
                    f"(dataset {self.dataset!r}, id {self.id!r})"
                )
