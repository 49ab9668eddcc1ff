"""A grid cell's hash holds the built weights: the same cache key built into other weights
(another CPU, another thread count) gives other hashes, so its results are never reused or
mixed silently; `weights_sha256` reads the digest from the model files themselves."""

from __future__ import annotations

import hashlib
import shutil

import pytest
from run_configs import PLANNED_GRID

from benchmarks.compare.cells import UNBUILT, model_identity, plan_cells, read_result
from benchmarks.compare.grid import GridError, grid_from_dict
from graft_env.policies.cache import weights_sha256
from graft_env.policies.tiny.config import TinyPairConfig, cache_key
from graft_env.policies.zoo import model_path

PAIR = f"tiny-pair-{cache_key(TinyPairConfig(), 0)}"


@pytest.fixture
def pair_copy(tmp_path, monkeypatch):
    """A copy of the built tiny pair in a cache of its own (`$GRAFT_CACHE_DIR`)."""
    built = model_path("tiny-a").parent
    cache = tmp_path / "cache"
    shutil.copytree(built, cache / built.name)
    monkeypatch.setenv("GRAFT_CACHE_DIR", str(cache))
    return cache / built.name


def hashes(out) -> dict[str, str]:
    return {c.cell_id: c.config_hash for c in plan_cells(grid_from_dict(PLANNED_GRID), out)}


def test_the_digest_is_that_of_the_weights_file(tmp_path, pair_copy):
    weights = (pair_copy / "tiny-a" / "model.safetensors").read_bytes()
    assert weights_sha256(pair_copy / "tiny-a") == hashlib.sha256(weights).hexdigest()
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty: no weight files"):
        weights_sha256(tmp_path / "empty")


def test_other_weights_under_the_same_key_make_other_cell_hashes(tmp_path, pair_copy):
    before = hashes(tmp_path / "out")
    digest = weights_sha256(pair_copy / "tiny-a")
    assert model_identity("tiny-a", {}) == f"{PAIR}/tiny-a@{digest}"
    cell = plan_cells(grid_from_dict(PLANNED_GRID), tmp_path / "out")[0]
    cell.directory.mkdir(parents=True)
    (cell.directory / "result.json").write_text(f'{{"config_hash": "{cell.config_hash}"}}')
    assert read_result(cell) is not None

    weights = pair_copy / "tiny-a" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last weight: as a build on another CPU differs
    weights.write_bytes(bytes(data))
    after = hashes(tmp_path / "out")
    assert after.keys() == before.keys()
    assert {c for c in before if after[c] != before[c]} == {c for c in before if "tiny-a" in c}
    stale = plan_cells(grid_from_dict(PLANNED_GRID), tmp_path / "out")[0]
    with pytest.raises(GridError, match=r"another config or other model weights"):
        read_result(stale)


def test_an_unbuilt_pair_hashes_as_unbuilt_and_build_builds_nothing_that_exists(
    tmp_path, pair_copy
):
    built = hashes(tmp_path / "out")
    stamp = (pair_copy / "tiny-b" / "model.safetensors").stat().st_mtime_ns
    shutil.move(pair_copy, tmp_path / "aside")
    assert model_identity("tiny-b", {}) == f"{PAIR}/tiny-b@{UNBUILT}"
    assert all(built[c] != h for c, h in hashes(tmp_path / "out").items())
    shutil.move(tmp_path / "aside", pair_copy)
    planned = plan_cells(grid_from_dict(PLANNED_GRID), tmp_path / "out", build=True)
    assert {c.cell_id: c.config_hash for c in planned} == built
    assert (pair_copy / "tiny-b" / "model.safetensors").stat().st_mtime_ns == stamp
