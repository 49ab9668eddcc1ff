"""Fixtures for the data tests: where the real benchmark files are.

Every checkout has the read-only benchmark files at `../shared/data` next to the
project root (see that folder's README); `$GRAFT_DATA_DIR` points elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = Path(os.environ.get("GRAFT_DATA_DIR") or DEFAULT_DATA_DIR)
    if not path.is_dir():
        pytest.fail(f"benchmark data not found at {path}; set GRAFT_DATA_DIR to its folder")
    return path
