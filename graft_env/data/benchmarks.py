"""The real datasets: the five evaluation benchmarks, MATH train and GSM8K.

Each is read from its JSONL file under the data directory (layout as in the data
README), or through the Hugging Face `datasets` library from the Hub (`source="hub"`),
for users who have no local copy; `source="auto"` (the default) reads the file when the
data directory has it and the Hub otherwise. `hub_row` maps a Hub row to the reference
file's fields (the Hub copies name some fields differently and lack the row numbers some
files carry as ids), so rows from either source go through the same `normalise_row` and
give the same problem ids; `graft data fetch` (`graft_env.data.fetch`) writes the Hub
copies in the files' layout. Hub ids (repository, config, hub split):

    math500     HuggingFaceH4/MATH-500                 test
    aime24      HuggingFaceH4/aime_2024                train  (the 30 problems)
    aime25      math-ai/aime25                         test
    amc23       math-ai/amc23                          test
    minerva     math-ai/minervamath                    test
    math_train  DigitalLearningGmbH/MATH-lighteval     default, train
    gsm8k       openai/gsm8k                           main, train / test

The hub copies are maintained by third parties and may differ in rows or text from the
files this project tests against; local files are the reference. Each split records the
reference file's row count and the digest of its problems (`problems_digest`), so a Hub
copy is checked against the reference.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graft_env.data import files as data_files
from graft_env.data.files import (
    find_data_dir,
    how_to_get_data,
    named_data_dir,
    read_jsonl,
    resolve_data_dir,
)
from graft_env.data.normalise import normalise_row
from graft_env.data.problem import DatasetError, Problem
from graft_env.data.registry import register_dataset

log = logging.getLogger(__name__)

SOURCES = ("auto", "files", "hub")


@dataclass(frozen=True)
class HubLocation:
    repo: str
    config: str | None
    split: str


@dataclass(frozen=True)
class Reference:
    """What the reference file of a split holds: its row count and `problems_digest`."""

    rows: int
    digest: str


@dataclass(frozen=True)
class Benchmark:
    name: str
    files: Mapping[str, str]  # split -> JSONL path relative to the data directory
    hub: Mapping[str, HubLocation]  # split -> where the same rows live on the hub
    reference: Mapping[str, Reference]  # split -> what its reference file holds
    default_split: str
    answer_after_marker: bool = False  # GSM8K: gold answer follows '####'
    # Start of a problem's text -> gold answer, for rows whose final box is empty.
    errata: Mapping[str, str] = field(default_factory=dict)
    # Hub field -> the reference file's name for it (when the file has no field of that name).
    hub_renames: Mapping[str, str] = field(default_factory=dict)
    # The reference file's field numbering rows from 0, which the Hub rows lack.
    index_field: str | None = None


BENCHMARKS = (
    Benchmark(
        "math500",
        {"test": "math500/test.jsonl"},
        {"test": HubLocation("HuggingFaceH4/MATH-500", None, "test")},
        {
            "test": Reference(
                500, "f7146684d2df795d51e147422e76a97443edb783fa35b92cc5e3046d7c215a9a"
            )
        },
        "test",
    ),
    Benchmark(
        "aime24",
        {"test": "aime24/test.jsonl"},
        {"test": HubLocation("HuggingFaceH4/aime_2024", None, "train")},
        {"test": Reference(30, "2f3a12930e4e9bde9dd87a5c5755edd1ce993bf2e651309bc0a245cb5efd8625")},
        "test",
    ),
    Benchmark(
        "aime25",
        {"test": "aime25/test.jsonl"},
        {"test": HubLocation("math-ai/aime25", None, "test")},
        {"test": Reference(30, "984969d0c5963c7a2dbc174574c00e95542f1b1d435bd22feda7dfc29d90c296")},
        "test",
        hub_renames={"problem": "question"},
    ),
    Benchmark(
        "amc23",
        {"test": "amc23/test.jsonl"},
        {"test": HubLocation("math-ai/amc23", None, "test")},
        {"test": Reference(40, "dd6d8b09b08f9a58bba9001cd48ad43c19dbf24e565c84caff115bd1a7cd707b")},
        "test",
    ),
    Benchmark(
        "minerva",
        {"test": "minerva_math/test.jsonl"},
        {"test": HubLocation("math-ai/minervamath", None, "test")},
        {
            "test": Reference(
                272, "8fbb44ffd84bb9c0323176562da979fa85d9d3a793c6270e2e3dc3f30930bca2"
            )
        },
        "test",
        hub_renames={"question": "problem"},
        index_field="idx",
    ),
    Benchmark(
        "math_train",
        {"train": "math_train/train.jsonl"},
        {"train": HubLocation("DigitalLearningGmbH/MATH-lighteval", "default", "train")},
        {
            "train": Reference(
                7500, "5f5302d873f107cc9227a3b0c9cf068dae4cad2b4cec3665d798f4aa0fb7da91"
            )
        },
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
        {
            "train": Reference(
                7473, "b613a66e634487cba98c0aefc006a8454bc4f239dfbc8875dfb2f02262a693e1"
            ),
            "test": Reference(
                1319, "201e42448b89ee98d972aaaaaa9c8edae5dd0ad4f4ed46452f690e864f242a22"
            ),
        },
        "test",
        answer_after_marker=True,
        index_field="idx",
    ),
)
BY_NAME = {benchmark.name: benchmark for benchmark in BENCHMARKS}


def load_benchmark(
    benchmark: Benchmark,
    split: str,
    data_dir: str | os.PathLike[str] | None = None,
    source: str = "auto",
) -> list[Problem]:
    """All rows of `benchmark`/`split` as problems, in file order, from `source`
    (`choose_source`).

    Raises `DatasetError` naming the file and line (or Hub row) of the first bad or
    duplicate row; an empty file is an error too, never an empty benchmark.
    """
    if choose_source(benchmark, split, data_dir, source) == "files":
        found = split_file(benchmark, split, data_dir)
        path = found if found is not None else resolve_data_dir(data_dir) / benchmark.files[split]
        rows: Iterable[tuple[str, Mapping[str, Any]]] = (
            (f"{path}:{line_number}", row) for line_number, row in read_jsonl(path)
        )
        return to_problems(benchmark, split, rows, str(path))
    location = benchmark.hub[split]
    rows = hub_rows(benchmark, location, read_hub_split(location, f"{benchmark.name} ({split})"))
    return to_problems(benchmark, split, rows, f"hub dataset {location.repo} ({location.split})")


def choose_source(
    benchmark: Benchmark, split: str, data_dir: str | os.PathLike[str] | None, source: str
) -> str:
    """Where `source` reads from, "files" or "hub". "auto" is "files" when a data directory
    is named (`data_dir` or `$GRAFT_DATA_DIR`: a missing file there is an error naming it,
    never a reason to go to the Hub) or a default one holds the split's file (`split_file`),
    else "hub", which is logged."""
    if source not in SOURCES:
        raise DatasetError(f"source must be one of {list(SOURCES)}, got {source!r}")
    if source != "auto":
        return source
    if named_data_dir(data_dir) is not None or split_file(benchmark, split, data_dir):
        return "files"
    log.info("%s (%s): no local file, reading the Hub copy", benchmark.name, split)
    return "hub"


def split_file(
    benchmark: Benchmark, split: str, data_dir: str | os.PathLike[str] | None
) -> Path | None:
    """The file `benchmark`/`split` is read from: in the named data directory (`data_dir`, else
    `$GRAFT_DATA_DIR`; it need not exist yet), else the first default data directory
    (the checkout's, then `graft data fetch`'s) that holds it; None when none does."""
    named = named_data_dir(data_dir)
    if named is not None:
        return find_data_dir(data_dir) / benchmark.files[split]  # a missing dir: an error
    for default in (data_files.CHECKOUT_DATA_DIR, data_files.user_data_dir()):
        if (default / benchmark.files[split]).is_file():
            return default / benchmark.files[split]
    return None


def to_problems(
    benchmark: Benchmark,
    split: str,
    rows: Iterable[tuple[str, Mapping[str, Any]]],
    origin: str,
) -> list[Problem]:
    """`(where, row)` pairs as problems; an error names the first bad or duplicate row."""
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


def problems_digest(problems: Sequence[Problem]) -> str:
    """SHA-256 (hex) of the problems' ids, texts and gold answers, in order: equal for two
    copies of a benchmark exactly when they pose the same problems with the same answers,
    whatever their field names or JSON formatting."""
    digest = hashlib.sha256()
    for problem in problems:
        line = json.dumps([problem.id, problem.problem, problem.answer], ensure_ascii=False)
        digest.update(f"{line}\n".encode())
    return digest.hexdigest()


def hub_row(benchmark: Benchmark, row: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Hub row number `index` of `benchmark` with the reference file's field names
    (`hub_renames`, where the row has no field of the new name) and its row number as the
    file's id field (`index_field`), so it normalises to the problem the file gives."""
    mapped = dict(row)
    for hub_name, file_name in benchmark.hub_renames.items():
        if hub_name in mapped and file_name not in mapped:
            mapped[file_name] = mapped.pop(hub_name)
    if benchmark.index_field is not None:
        mapped.setdefault(benchmark.index_field, index)
    return mapped


def read_hub_split(location: HubLocation, what: str) -> Iterable[Mapping[str, Any]]:
    """The rows of one Hub split through `datasets.load_dataset` (downloaded once, then
    read from the `datasets` cache). A missing package or an unreachable Hub is one line,
    beginning with `what`, that names both ways to get the data."""
    try:
        import datasets  # optional: only the Hub source needs it
    except ImportError:
        raise DatasetError(
            f"{what}: no local file, and reading the Hub copy needs the `datasets` package; "
            f"{how_to_get_data()}"
        ) from None
    try:
        return datasets.load_dataset(location.repo, location.config, split=location.split)
    except Exception as error:  # offline, no such repo, an HTTP error: all say the same
        first = (str(error).strip().splitlines() or [""])[0]
        raise DatasetError(
            f"{what}: cannot read {location.repo} ({location.split}) from the Hugging Face "
            f"Hub ({type(error).__name__}: {first}); {how_to_get_data()}"
        ) from None


def hub_rows(
    benchmark: Benchmark, location: HubLocation, rows: Iterable[Mapping[str, Any]]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """`(where, row)` for each Hub row, mapped by `hub_row`; `where` names the Hub row."""
    for index, row in enumerate(rows):
        yield f"{location.repo} ({location.split}) row {index}", hub_row(benchmark, row, index)


for _benchmark in BENCHMARKS:
    register_dataset(
        _benchmark.name, splits=tuple(_benchmark.files), default_split=_benchmark.default_split
    )(functools.partial(load_benchmark, _benchmark))
