"""Grid files of `graft compare`: validation names the field; cells are planned as documented."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml
from run_configs import TWO_SEED_BASE as BASE
from run_configs import TWO_SEED_GRID as GRID

from benchmarks.compare.cells import plan_cells
from benchmarks.compare.grid import GridError, grid_from_dict, load_grid

REPO = Path(__file__).resolve().parents[2]


def changed(path: str, value) -> dict:
    """GRID with the value at a dotted path (list indices as numbers) replaced."""
    data = copy.deepcopy(GRID)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[int(last) if isinstance(node, list) else last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("algorithms.0.name", "grpoo", r"algorithms\.0: unknown algorithm 'grpoo'"),
        ("algorithms.1.options", {"dleta": 0.5}, r"algorithms\.1: unknown option\(s\) \['dleta'\]"),
        ("algorithms.1.options", {"n": 1}, r"^algorithms\.1\.options\.n: 1 must be >= 2$"),
        ("algorithms.1.label", "GRPO n=4", r"algorithms\.1\.label: 'GRPO n=4' is used twice"),
        ("algorithms.2.stored_peer_from", None, r"algorithms\.2: 'graft-stored' replays"),
        ("algorithms.2.stored_peer_from", "stored", r"algorithms\.2\.stored_peer_from: 'stored'"),
        ("pairs.0.models", ["tiny-a"], r"pairs\.0\.models: expected at least 2 item\(s\), got 1"),
        ("pairs.0.options", {"tiny-c": {}}, r"pairs\.0\.options: unknown key\(s\) \['tiny-c'\]"),
        (
            "pairs.0.options",
            {"tiny-b": {"lrr": 1e-4}},
            r"^pairs\.0\.options\.tiny-b\.lrr: unknown option; valid: temperature, ",
        ),
        (
            "pairs.0.options",
            {"tiny-b": {"lr": "fast"}},
            r"^pairs\.0\.options\.tiny-b\.lr: 'fast' is not ",
        ),
        ("seeds", [0, 0], r"seeds: a seed is listed twice"),
        ("seeds", [-1], r"^seeds\.0: -1 must be >= 0$"),
        ("eval.sets", ["procedural/algebra"], r"eval\.sets\.0: unknown set 'procedural/algebra'"),
        ("eval.sets", ["math5000"], r"eval\.sets\.0: unknown set 'math5000'"),
        ("eval.k", 0, r"^eval\.k: 0 must be >= 1$"),
        ("eval.top_p", 1.5, r"^eval\.top_p: 1\.5 must be <= 1$"),
        ("eval.checkpoint", "best", r"eval\.checkpoint: 'best' needs periodic_eval"),
        (
            "eval.procedural",
            {"level": 1},
            r"^eval\.procedural\.level: unknown key; valid: difficulty, families, seed$",
        ),
        ("baseline", "GRPO n=16", r"baseline: 'GRPO n=16' is not an algorithm label"),
        ("base", "missing.yaml", r"base: run config .*missing\.yaml does not exist"),
        ("seed", 3, r"^seed: unknown key; valid: algorithms, base, baseline, eval, "),
        ("eval.limit", 2.5, r"^eval\.limit: 2\.5 is not an integer$"),
        ("eval.k", "ten", r"^eval\.k: 'ten' is not an integer$"),
        ("include_base", "yes", r"^include_base: 'yes' is not true or false$"),
        ("algorithms", [], r"^algorithms: expected at least 1 item\(s\), got 0"),
        ("algorithms.0.options", [1], r"^algorithms\.0\.options: expected a mapping, got list"),
        ("eval.checkpoint", "last", r"^eval\.checkpoint: 'last' is not one of 'best', 'final'"),
        ("threads", 0, r"^threads: 0 must be >= 1$"),
    ],
)
def test_invalid_grids_name_the_field(path, value, message):
    with pytest.raises(GridError, match=message):
        grid_from_dict(changed(path, value))


def test_cells_are_planned_per_model_or_per_pair_and_stored_runs_read_their_source(tmp_path):
    grid = grid_from_dict(GRID)
    cells = plan_cells(grid, tmp_path)
    ids = [cell.cell_id for cell in cells]
    per_seed = ["grpo-n-4/tiny-a", "grpo-n-4/tiny-b", "graft/tiny-a+tiny-b"]
    per_seed += ["stored/tiny-a", "stored/tiny-b"]
    assert ids == ["base/tiny-a", "base/tiny-b"] + [
        f"{cell}/seed{seed}" for seed in (0, 1) for cell in per_seed
    ]
    by_id = {cell.cell_id: cell for cell in cells}
    stored = by_id["stored/tiny-a/seed1"].config
    assert stored.stored_peer.agent == "tiny-b"
    assert stored.stored_peer.run_dir == str(by_id["grpo-n-4/tiny-b/seed1"].directory / "run")
    graft = by_id["graft/tiny-a+tiny-b/seed0"].config
    # agent options: the base config's for the model, then the pair's own
    assert [dict(a.options) for a in graft.agents] == [{"lr": 1e-4}, {"lr": 3e-4}]
    assert graft.algorithm == "graft" and graft.seed == 0 and graft.eval.every == 0
    assert Path(graft.run_dir) == tmp_path / "cells" / "graft" / "tiny-a+tiny-b" / "seed0" / "run"
    assert by_id["base/tiny-a"].config is None
    assert by_id["base/tiny-a"].pair.own_skills["tiny-a"] == (
        "addition",
        "multiplication",
        "linear_equation",
    )


def test_the_config_hash_follows_the_experiment_not_the_output_folder(tmp_path):
    def hashes(data, out):
        return {c.cell_id: c.config_hash for c in plan_cells(grid_from_dict(data), out)}

    before = hashes(GRID, tmp_path / "one")
    assert before == hashes(GRID, tmp_path / "two")
    options = {"tiny-a": {"lr": 1e-3}, "tiny-b": {"lr": 3e-4}}  # tiny-a's lr changes
    after = hashes(changed("pairs.0.options", options), tmp_path / "one")
    differs = sorted(cell for cell in before if before[cell] != after[cell])
    # every cell that trains or evaluates tiny-a, and the stored runs replaying tiny-a
    assert differs == sorted(
        ["base/tiny-a"]
        + [
            f"{cell}/seed{seed}"
            for seed in (0, 1)
            for cell in ("grpo-n-4/tiny-a", "graft/tiny-a+tiny-b", "stored/tiny-a", "stored/tiny-b")
        ]
    )


def test_grid_files_extend_and_take_overrides(tmp_path):
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(BASE))
    parent = {**copy.deepcopy(GRID), "base": "run.yaml"}
    (tmp_path / "parent.yaml").write_text(yaml.safe_dump(parent))
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "child.yaml").write_text(
        yaml.safe_dump({"extends": "../parent.yaml", "seeds": [5], "train": {"steps": 3}})
    )
    grid = load_grid(sub / "child.yaml", ["eval.k=3", "periodic_eval={every: 1}"])
    assert grid.name == "child" and grid.seeds == (5,) and grid.base["steps"] == 3
    assert grid.eval.k == 3 and grid.periodic.k == 3 and grid.periodic.limit == 4
    assert [entry.label for entry in grid.algorithms] == ["GRPO n=4", "GRAFT", "stored"]
    with pytest.raises(GridError, match=r"child\.yaml: seeds\.0: 'x' is not an integer$"):
        load_grid(sub / "child.yaml", ["seeds=[x]"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("seeds: [0\nbase: x\n", r"grid\.yaml:2:5: YAML syntax error: .*flow sequence"),
        ("seeds:\n\t- 0\n", r"grid\.yaml:2:1: YAML syntax error: .*tabs"),
        ("- seeds: [0]\n", r"grid\.yaml: expected a mapping at the top level, got a list"),
    ],
)
def test_a_broken_grid_file_is_one_line_naming_file_and_line(tmp_path, text, message):
    (tmp_path / "grid.yaml").write_text(text)
    with pytest.raises(GridError, match=message) as caught:
        load_grid(tmp_path / "grid.yaml")
    assert "\n" not in str(caught.value)
    with pytest.raises(GridError, match=r"is a directory, not a YAML file"):
        load_grid(tmp_path)


def test_a_pair_can_be_its_bare_model_list():
    grid = grid_from_dict(changed("pairs", [["tiny-a", "tiny-b"]]))
    assert grid.pairs[0].models == ("tiny-a", "tiny-b")


@pytest.mark.parametrize("name", ["compare_tiny.yaml", "compare_tiny_full.yaml"])
def test_the_shipped_grids_are_valid(name, tmp_path):
    grid = load_grid(REPO / "configs" / "grids" / name)
    cells = plan_cells(grid, tmp_path)
    assert len(grid.seeds) >= 3 and grid.baseline == "GRPO n=8"
    assert sum(cell.config is None for cell in cells) == 2  # the two base models
    labels = {entry.label for entry in grid.algorithms}
    assert {"GRPO n=8", "GRAFT"} <= labels
    if name == "compare_tiny_full.yaml":
        assert {"GRPO n=16", "GRPO n=32", "no compat", "no clip", "SGT", "HACPO"} <= labels


def test_the_config_hash_follows_the_resolved_preset_not_only_its_name(tmp_path, monkeypatch):
    """A changed preset or default (as when Eq.1 moved to the sample std) must retrain the
    cells that use it, not reuse them: the hash holds the resolved options, not the name."""
    from algorithms import registry

    def hashes():
        return {c.cell_id: c.config_hash for c in plan_cells(grid_from_dict(GRID), tmp_path)}

    before = hashes()
    graft = registry._PRESETS["graft"]
    monkeypatch.setitem(
        registry._PRESETS, "graft", lambda: dataclasses.replace(graft(), adv_ddof=0)
    )
    after = hashes()
    differs = sorted(cell for cell in before if before[cell] != after[cell])
    assert differs == [f"graft/tiny-a+tiny-b/seed{seed}" for seed in (0, 1)]


def test_testbed_members_get_their_own_skills_from_the_testbed_build_config():
    from benchmarks.compare.grid import default_own_skills

    assert default_own_skills("testbed-a") == ("addition", "multiplication", "linear_equation")
    assert default_own_skills("testbed-b") == ("subtraction", "modular", "gcd")
    assert default_own_skills("some/other/model") is None


def test_a_testbed_cell_is_identified_by_the_testbed_build_not_the_working_directory(
    tmp_path, monkeypatch
):
    from benchmarks.compare.cells import model_identity
    from graft_env.policies.tiny.config import TESTBED, TinyPairConfig, cache_key

    identity = model_identity("testbed-a", {})  # + "@" the built weights' digest or unbuilt
    assert identity.startswith(f"testbed-pair-{cache_key(TESTBED, 0)}/testbed-a@")
    monkeypatch.chdir(tmp_path)
    assert model_identity("testbed-a", {}) == identity
    assert model_identity("testbed-b", {"tiny_seed": 1}).startswith(
        f"testbed-pair-{cache_key(TESTBED, 1)}/"
    )
    tiny = f"tiny-pair-{cache_key(TinyPairConfig(), 0)}/tiny-a@"
    assert model_identity("tiny-a", {}).startswith(tiny)
