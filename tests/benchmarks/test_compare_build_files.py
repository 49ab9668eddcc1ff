"""A grid pair's committed build (`build: {path, weights_sha256}`): its members load from the
directory inside the repository, named by weights SHA-256, and a build whose weights differ
from the named ones is refused in one line naming the path and both digests; nothing from
this machine's cache is used in its place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from run_configs import PLANNED_GRID

from benchmarks.compare.cells import model_identity, plan_cells
from benchmarks.compare.grid import GridError, grid_from_dict
from graft_env.policies.cache import weights_sha256
from graft_env.policies.zoo import model_path

BUILDS = Path("results") / "builds"  # where a study keeps its builds, inside the checkout


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout (the working directory) holding a copy of the built tiny pair under
    results/builds, and an empty `$GRAFT_CACHE_DIR`: only the copy can be loaded."""
    built = model_path("tiny-a").parent
    root = tmp_path / "checkout"
    shutil.copytree(built, root / BUILDS / built.name)
    (tmp_path / "empty-cache").mkdir()
    monkeypatch.setenv("GRAFT_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.chdir(root)
    return root / BUILDS / built.name


def grid_data(build: Path, **changes) -> dict:
    """PLANNED_GRID with its pair naming `build` by its members' weights SHA-256."""
    digests = {m: weights_sha256(build / m) for m in ("tiny-a", "tiny-b")}
    pair = {"models": ["tiny-a", "tiny-b"], "build": {"path": str(BUILDS / build.name)}}
    pair["build"]["weights_sha256"] = digests
    return {**PLANNED_GRID, "pairs": [{**pair, **changes}]}


def test_the_members_load_from_the_named_build_and_its_place_is_not_hashed(checkout, tmp_path):
    grid = grid_from_dict(grid_data(checkout), Path.cwd())
    cells = plan_cells(grid, tmp_path / "out")
    seed = json.loads((checkout / "build.json").read_text())["seed"]
    for cell in cells:
        for agent, model in cell.models.items():
            options = cell.agent_options[agent]
            assert options == {"tiny_seed": seed, "cache_dir": str(BUILDS)}  # as results show it
            digest = weights_sha256(checkout / model)
            assert model_identity(model, options) == f"{checkout.name}/{model}@{digest}"
            assert model_path(model, cache_dir=options["cache_dir"], tiny_seed=seed).resolve() == (
                checkout / model
            )
    # the same build in another checkout, elsewhere on another machine: the same cells
    moved = tmp_path / "elsewhere"
    shutil.copytree(Path.cwd(), moved)
    again = plan_cells(grid_from_dict(grid_data(moved / BUILDS / checkout.name), moved), moved)
    assert [c.config_hash for c in again] == [c.config_hash for c in cells]


def test_other_weights_at_the_path_are_refused_in_one_line(checkout):
    data = grid_data(checkout)
    named = data["pairs"][0]["build"]["weights_sha256"]["tiny-b"]
    weights = checkout / "tiny-b" / "model.safetensors"
    changed = bytearray(weights.read_bytes())
    changed[-1] ^= 1  # one bit of the last weight: as a build on another CPU differs
    weights.write_bytes(bytes(changed))
    found = weights_sha256(checkout / "tiny-b")
    with pytest.raises(GridError) as error:
        grid_from_dict(data, Path.cwd())
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("pairs.0.build: ")
    assert str(checkout / "tiny-b") in message and named in message and found in message


def test_a_directory_that_is_not_the_named_build_is_refused(checkout, tmp_path):
    (checkout / "build.json").rename(tmp_path / "build.json")  # an unfinished build
    with pytest.raises(GridError, match=r"pairs\.0\.build: .*: no build\.json; not a finished"):
        grid_from_dict(grid_data(checkout), Path.cwd())
    (tmp_path / "build.json").rename(checkout / "build.json")

    renamed = checkout.with_name("tiny-pair-elsewhere")
    checkout.rename(renamed)  # the loader looks a build up by <pair>-<key>
    with pytest.raises(GridError, match=r"the loader finds it only in a directory named"):
        grid_from_dict(grid_data(renamed), Path.cwd())
    renamed.rename(checkout)

    build = json.loads((checkout / "build.json").read_text())
    (checkout / "build.json").write_text(json.dumps({**build, "seed": build["seed"] + 1}))
    with pytest.raises(GridError, match=r"config gives key [0-9a-f]+: another config's build"):
        grid_from_dict(grid_data(checkout), Path.cwd())


def test_the_grid_says_what_the_build_needs(checkout):
    data = grid_data(checkout)
    data["pairs"][0]["build"]["weights_sha256"].pop("tiny-b")
    with pytest.raises(GridError, match=r"names \['tiny-a'\]; the build's members are"):
        grid_from_dict(data, Path.cwd())
    seeded = grid_data(checkout, options={"tiny-a": {"tiny_seed": 0}})
    with pytest.raises(GridError, match=r"pairs\.0\.build: tiny-a sets tiny_seed, which the"):
        grid_from_dict(seeded, Path.cwd())
    other = grid_data(checkout, models=["tiny-a", "testbed-b"])
    with pytest.raises(GridError, match=r"are not the two members of a built-in pair"):
        grid_from_dict(other, Path.cwd())
