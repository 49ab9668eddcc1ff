"""Where the data directory is, and reading its JSONL files row by row.

The benchmark files are never copied into the project: every run points at a data
directory (by argument, `$GRAFT_DATA_DIR`, or the checkout's ../shared/data). Errors name
the file and line so a broken or truncated download is found at once, not as a strange
score later.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from graft_env.data.problem import DatasetError

DATA_DIR_ENV = "GRAFT_DATA_DIR"
# Where a checkout finds the benchmark files when nothing else is said: ../shared/data next to
# the project root (read-only, with its own README).
CHECKOUT_DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: `data_dir` if given, else `$GRAFT_DATA_DIR`, else the checkout's
    `CHECKOUT_DATA_DIR` if it exists. Every command and loader finds the data through here.

    Raises `DatasetError` if none is set or the directory does not exist.
    """
    if data_dir is not None:
        path, origin = Path(data_dir), "data_dir"
    elif os.environ.get(DATA_DIR_ENV, "").strip():
        path, origin = Path(os.environ[DATA_DIR_ENV].strip()), f"${DATA_DIR_ENV}"
    elif CHECKOUT_DATA_DIR.is_dir():
        return CHECKOUT_DATA_DIR
    else:
        raise DatasetError(
            f"no data directory: pass data_dir=... (--data-dir) or set ${DATA_DIR_ENV}; "
            f"the checkout's default {CHECKOUT_DATA_DIR} does not exist"
        )
    path = path.expanduser()
    if not path.is_dir():
        raise DatasetError(f"data directory {str(path)!r} (from {origin}) does not exist")
    return path


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
