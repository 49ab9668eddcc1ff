"""The real datasets: the five evaluation benchmarks, MATH train and GSM8K.

Each is read from its JSONL file under the data directory (layout as in the data
README). `source="hub"` reads the same set through the Hugging Face `datasets`
library instead, for users who have no local copy; rows from either source go
through the same `normalise_row`. Hub ids (repository, config, hub split):

    math500     HuggingFaceH4/MATH-500                 test
    aime24      HuggingFaceH4/aime_2024                train  (the 30 problems)
    aime25      math-ai/aime25                         test
    amc23       math-ai/amc23                          test
    minerva     math-ai/minervamath                    test
    math_train  DigitalLearningGmbH/MATH-lighteval     default, train
    gsm8k       openai/gsm8k                           main, train / test

The hub copies are maintained by third parties and may differ in field names or
rows from the files this project tests against; local files are the reference.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from graft_env.data.files import read_jsonl, resolve_data_dir
from graft_env.data.normalise import normalise_row
from graft_env.data.problem import DatasetError, Problem
from graft_env.data.registry import register_dataset

SOURCES = ("files", "hub")


@dataclass(frozen=True)
class HubLocation:
    repo: str
    config: str | None
    split: str


@dataclass(frozen=True)
class Benchmark:
    name: str
    files: Mapping[str, str]  # split -> JSONL path relative to the data directory
    hub: Mapping[str, HubLocation]  # split -> where the same rows live on the hub
    default_split: str
    answer_after_marker: bool = False  # GSM8K: gold answer follows '####'
    # Start of a problem's text -> gold answer, for rows whose final box is empty.
    errata: Mapping[str, str] = field(default_factory=dict)


BENCHMARKS = (
    Benchmark(
        "math500",
        {"test": "math500/test.jsonl"},
        {"test": HubLocation("HuggingFaceH4/MATH-500", None, "test")},
        "test",
    ),
    Benchmark(
        "aime24",
        {"test": "aime24/test.jsonl"},
        {"test": HubLocation("HuggingFaceH4/aime_2024", None, "train")},
        "test",
    ),
    Benchmark(
        "aime25",
        {"test": "aime25/test.jsonl"},
        {"test": HubLocation("math-ai/aime25", None, "test")},
        "test",
    ),
    Benchmark(
        "amc23",
        {"test": "amc23/test.jsonl"},
        {"test": HubLocation("math-ai/amc23", None, "test")},
        "test",
    ),
    Benchmark(
        "minerva",
        {"test": "minerva_math/test.jsonl"},
        {"test": HubLocation("math-ai/minervamath", None, "test")},
        "test",
    ),
    Benchmark(
        "math_train",
        {"train": "math_train/train.jsonl"},
        {"train": HubLocation("DigitalLearningGmbH/MATH-lighteval", "default", "train")},
        "train",
        # Two MATH train solutions end in an empty \boxed{} (lines 5342 and 5344 of
        # the file). Both prove every candidate composite, so the count asked for is
        # 0, choice (A).
        errata={
            "For any integer $n>1$, the number of prime numbers greater than $n!+1$": "0",
            "You are given a sequence of $58$ terms; each term has the form $P+n$": "0",
        },
    ),
    Benchmark(
        "gsm8k",
        {"train": "gsm8k/train.jsonl", "test": "gsm8k/test.jsonl"},
        {
            "train": HubLocation("openai/gsm8k", "main", "train"),
            "test": HubLocation("openai/gsm8k", "main", "test"),
        },
        "test",
        answer_after_marker=True,
    ),
)


def load_benchmark(
    benchmark: Benchmark,
    split: str,
    data_dir: str | os.PathLike[str] | None = None,
    source: str = "files",
) -> list[Problem]:
    """All rows of `benchmark`/`split` as problems, in file order.

    Raises `DatasetError` naming the file and line of the first bad or duplicate
    row; an empty file is an error too, never an empty benchmark.
    """
    if source == "files":
        path = resolve_data_dir(data_dir) / benchmark.files[split]
        rows: Iterator[tuple[str, Mapping[str, Any]]] = (
            (f"{path}:{line_number}", row) for line_number, row in read_jsonl(path)
        )
        origin = str(path)
    elif source == "hub":
        location = benchmark.hub[split]
        rows = _hub_rows(location)
        origin = f"hub dataset {location.repo} ({location.split})"
    else:
        raise DatasetError(f"source must be one of {list(SOURCES)}, got {source!r}")

    problems: list[Problem] = []
    first_seen: dict[str, str] = {}
    for index, (where, row) in enumerate(rows):
        problem = normalise_row(
            row,
            dataset=benchmark.name,
            split=split,
            index=index,
            where=where,
            answer_after_marker=benchmark.answer_after_marker,
            errata=benchmark.errata,
        )
        if problem.id in first_seen:
            raise DatasetError(
                f"{where}: duplicate id {problem.id!r} (first at {first_seen[problem.id]})"
            )
        first_seen[problem.id] = where
        problems.append(problem)
    if not problems:
        raise DatasetError(f"{origin}: no rows")
    return problems


def _hub_rows(location: HubLocation) -> Iterator[tuple[str, Mapping[str, Any]]]:
    try:
        import datasets  # optional: only the hub fallback needs it
    except ImportError as exc:
        raise DatasetError(
            "source='hub' needs the Hugging Face `datasets` package "
            "(pip install 'graft-rlvr[hub]'); or read local files with source='files'"
        ) from exc
    rows = datasets.load_dataset(location.repo, location.config, split=location.split)
    for index, row in enumerate(rows):
        yield f"{location.repo} ({location.split}) row {index}", row


for _benchmark in BENCHMARKS:
    register_dataset(
        _benchmark.name, splits=tuple(_benchmark.files), default_split=_benchmark.default_split
    )(functools.partial(load_benchmark, _benchmark))
