"""Fixtures every test folder shares: where the real benchmark files are, and one
torch thread (tiny models run much faster on one thread when the 2 cores are shared).

Every checkout has the read-only benchmark files at `../shared/data` next to the
project root (see that folder's README); `$GRAFT_DATA_DIR` points elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = Path(os.environ.get("GRAFT_DATA_DIR") or DEFAULT_DATA_DIR)
    if not path.is_dir():
        pytest.fail(f"benchmark data not found at {path}; set GRAFT_DATA_DIR to its folder")
    return path


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
