"""The shipped configs are package data: a `--config` path that names no file finds the
shipped config it names, from any directory, and a file that exists always wins."""

from __future__ import annotations

from pathlib import Path

from benchmarks import cli
from benchmarks.config_files import default_config, find_config, packaged

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_configs_are_the_checkouts(tmp_path):
    shipped = sorted(p.relative_to(packaged()) for p in packaged().rglob("*.yaml"))
    assert shipped == sorted(
        p.relative_to(REPO / "configs") for p in (REPO / "configs").rglob("*.yaml")
    )
    assert (
        default_config().read_bytes() == (REPO / "configs" / "testbed_pair_graft.yaml").read_bytes()
    )


def test_a_config_name_is_found_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    tiny = packaged() / "tiny_pair_graft.yaml"
    for name in ("configs/tiny_pair_graft.yaml", "tiny_pair_graft.yaml", "tiny_pair_graft"):
        assert Path(find_config(name)) == tiny, name
    assert Path(find_config("configs/grids/study")) == packaged() / "grids" / "study.yaml"
    assert find_config("no_such_config.yaml") == "no_such_config.yaml"  # the error names it
    assert find_config("../configs/tiny_pair_graft.yaml") == "../configs/tiny_pair_graft.yaml"
    (tmp_path / "configs").mkdir()
    own = tmp_path / "configs" / "tiny_pair_graft.yaml"
    own.write_text("agents: []\n")
    assert find_config("configs/tiny_pair_graft.yaml") == "configs/tiny_pair_graft.yaml"
    own.unlink()
    assert cli.main(["config", "validate", "configs/tiny_pair_graft.yaml"]) == 0
    assert "valid (graft, agents tiny-a, tiny-b" in capsys.readouterr().out
