"""Where the data directory is, and reading its JSONL files row by row.

The benchmark files are never copied into the project: every run points at a data
directory (by argument, `$GRAFT_DATA_DIR`, the checkout's ../shared/data, or the user data
directory `graft data fetch` writes to). Errors name the file and line so a broken or
truncated download is found at once, not as a strange score later.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from graft_env.data.problem import DatasetError
from graft_env.policies.cache import default_cache_dir

DATA_DIR_ENV = "GRAFT_DATA_DIR"
# Where a checkout finds the benchmark files when nothing else is said: ../shared/data next to
# the project root (read-only, with its own README).
CHECKOUT_DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"


def user_data_dir() -> Path:
    """Where `graft data fetch` writes when no data directory is named: `data/` in the
    graft cache (`$GRAFT_CACHE_DIR`, else ~/.cache/graft), beside the built models."""
    return default_cache_dir() / "data"


def named_data_dir(data_dir: str | os.PathLike[str] | None = None) -> tuple[Path, str] | None:
    """The data directory the caller or `$GRAFT_DATA_DIR` names, with where it came from;
    None when neither names one."""
    if data_dir is not None:
        return Path(data_dir).expanduser(), "data_dir"
    if os.environ.get(DATA_DIR_ENV, "").strip():
        return Path(os.environ[DATA_DIR_ENV].strip()).expanduser(), f"${DATA_DIR_ENV}"
    return None


def find_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The data directory: `data_dir` if given, else `$GRAFT_DATA_DIR`, else the checkout's
    `CHECKOUT_DATA_DIR`, else `user_data_dir()`, the first two only if they exist; None when
    nothing is named and neither default exists.

    Raises `DatasetError` if a named directory does not exist: a typo never falls through
    to another copy of the data.
    """
    named = named_data_dir(data_dir)
    if named is not None:
        path, origin = named
        if not path.is_dir():
            raise DatasetError(f"data directory {str(path)!r} (from {origin}) does not exist")
        return path
    for default in (CHECKOUT_DATA_DIR, user_data_dir()):
        if default.is_dir():
            return default
    return None


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """`find_data_dir`, where a missing directory is an error that names both ways to get
    the data (a data directory, or `graft data fetch` / the Hub source)."""
    path = find_data_dir(data_dir)
    if path is None:
        raise DatasetError(f"no data directory: {how_to_get_data()}")
    return path


def how_to_get_data() -> str:
    """The two ways to get the benchmarks, as error messages say them."""
    return (
        f"point --data-dir (data_dir=...) or ${DATA_DIR_ENV} at a folder with the benchmark "
        f"files, or download them from the Hugging Face Hub with `graft data fetch` (into "
        f"{user_data_dir()}; needs the datasets package: pip install datasets)"
    )


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line_number, row)` for each non-blank line of a JSONL file.

    Line numbers start at 1, as editors show them. Blank lines carry no row and are
    skipped; anything else that is not a JSON object raises `DatasetError`.
    """
    if not path.is_file():
        raise DatasetError(f"dataset file {str(path)!r} not found")
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{line_number}: invalid JSON ({exc.msg})") from exc
            if not isinstance(row, dict):
                raise DatasetError(
                    f"{path}:{line_number}: expected a JSON object, got {type(row).__name__}"
                )
            yield line_number, row
