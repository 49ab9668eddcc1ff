"""portable_path: what a committed result records of a machine's cache and scratch paths."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from graft_env.policies.cache import portable_path


def test_cache_and_scratch_paths_are_written_relative_to_their_root(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAFT_CACHE_DIR", str(tmp_path / "cache"))
    built = tmp_path / "cache" / "gap-d0-048d" / "a"
    assert portable_path(built) == "$GRAFT_CACHE_DIR/gap-d0-048d/a"
    scratch = Path(tempfile.mkdtemp(prefix="device-check-"))
    assert portable_path(scratch / "m") == f"$TMPDIR/{scratch.name}/m"


@pytest.mark.parametrize("path", ["tiny-a", "configs/x.yaml", "/opt/models/qwen3"])
def test_other_paths_are_kept_as_given(monkeypatch, tmp_path, path):
    monkeypatch.setenv("GRAFT_CACHE_DIR", str(tmp_path / "cache"))
    assert portable_path(path) == path
    monkeypatch.chdir(tmp_path)  # a checkout under the temporary directory (CI's clone may be)
    assert portable_path(path) == path
