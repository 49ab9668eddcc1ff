"""Where the data directory is, and reading its JSONL files row by row.

The benchmark files are never copied into the project: every run points at a data
directory (by argument or `$GRAFT_DATA_DIR`). Errors name the file and line so a
broken or truncated download is found at once, not as a strange score later.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from graft_env.data.problem import DatasetError

DATA_DIR_ENV = "GRAFT_DATA_DIR"


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: `data_dir` if given, else `$GRAFT_DATA_DIR`.

    Raises `DatasetError` if neither is set or the directory does not exist.
    """
    if data_dir is None:
        from_env = os.environ.get(DATA_DIR_ENV, "").strip()
        if not from_env:
            raise DatasetError(
                f"no data directory: pass data_dir=... or set ${DATA_DIR_ENV} "
                "(in a checkout the benchmark files live in ../shared/data)"
            )
        path, origin = Path(from_env), f"${DATA_DIR_ENV}"
    else:
        path, origin = Path(data_dir), "data_dir"
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
