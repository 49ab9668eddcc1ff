"""Download the real benchmarks from the Hugging Face Hub into a data directory, in the
reference layout (what `graft data fetch` runs).

Each split is read from the Hub (`benchmarks.read_hub_split`), mapped to the reference
file's fields (`benchmarks.hub_row`) and checked before it is written: its row count must be
the reference file's (a short or changed Hub copy writes nothing), and the digest of its
problems (`benchmarks.problems_digest`) is compared with the reference's and reported, so a
copy whose text or answers differ from the files this project's numbers come from is never
taken for one. A file is written under a temporary name and renamed into place: a fetch that
is interrupted never leaves a truncated file for the files source to read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from graft_env.data.benchmarks import (
    BENCHMARKS,
    BY_NAME,
    Benchmark,
    hub_rows,
    problems_digest,
    read_hub_split,
    to_problems,
)
from graft_env.data.files import named_data_dir, user_data_dir
from graft_env.data.problem import DatasetError
from graft_env.suggest import did_you_mean


@dataclass(frozen=True)
class Fetched:
    """One split's outcome: `written` False when an existing file was kept; `matches` says
    whether its problems equal the reference's (None: not read, the kept file)."""

    name: str
    split: str
    path: Path
    written: bool
    rows: int | None
    matches: bool | None


def fetch_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where fetched files go: `data_dir`, else `$GRAFT_DATA_DIR`, else `user_data_dir()`
    (which the loaders search when nothing is named). Created if missing."""
    named = named_data_dir(data_dir)
    path = user_data_dir() if named is None else named[0]
    path.mkdir(parents=True, exist_ok=True)
    return path


def targets(names: Sequence[str] = ()) -> list[tuple[Benchmark, str]]:
    """The (benchmark, split) pairs of `names` (none: every benchmark), each split of each."""
    unknown = [name for name in names if name not in BY_NAME]
    if unknown:
        raise DatasetError(
            f"no Hub copy of dataset {unknown[0]!r}; these are fetched: {sorted(BY_NAME)}"
            f"{did_you_mean(unknown[0], BY_NAME)}"
        )
    chosen = [BY_NAME[name] for name in dict.fromkeys(names)] or list(BENCHMARKS)
    return [(benchmark, split) for benchmark in chosen for split in benchmark.files]


def fetch(
    names: Sequence[str] = (),
    data_dir: str | os.PathLike[str] | None = None,
    *,
    force: bool = False,
    report: Callable[[str], None] = print,
) -> list[Fetched]:
    """Write the Hub copy of each split of `names` (none: all) under `fetch_dir(data_dir)`,
    saying what it does through `report`, one line per step. An existing file is kept
    unless `force`. Raises `DatasetError` when a Hub copy's row count is not the reference
    file's (nothing is written for it; splits fetched before it stay)."""
    root = fetch_dir(data_dir)
    chosen = targets(names)
    done = []
    for number, (benchmark, split) in enumerate(chosen, start=1):
        path = root / benchmark.files[split]
        step = f"[{number}/{len(chosen)}] {benchmark.name} {split}"
        if path.is_file() and not force:
            report(f"{step}: {path} is there, kept (--force downloads it again)")
            done.append(Fetched(benchmark.name, split, path, False, None, None))
            continue
        location, reference = benchmark.hub[split], benchmark.reference[split]
        origin = f"hub dataset {location.repo} ({location.split})"
        report(f"{step}: reading {origin}")
        rows = list(
            hub_rows(benchmark, location, read_hub_split(location, f"{benchmark.name} ({split})"))
        )
        if len(rows) != reference.rows:
            raise DatasetError(
                f"{benchmark.name} ({split}): {origin} has {len(rows)} rows, the reference "
                f"file {benchmark.files[split]} has {reference.rows}; nothing written"
            )
        matches = problems_digest(to_problems(benchmark, split, rows, origin)) == reference.digest
        _write_jsonl(path, [row for _, row in rows])
        report(
            f"{step}: wrote {len(rows)} rows (the reference file's count) to {path}; "
            + (
                "same problems and answers as the reference file"
                if matches
                else "its problems or answers differ from the reference file's, so scores "
                "on it are not comparable with those from the reference copy"
            )
        )
        done.append(Fetched(benchmark.name, split, path, True, len(rows), matches))
    return done


def _write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(partial, path)
