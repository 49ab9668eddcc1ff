"""A strategy from outside the repository trains through `graft train`: by `module:Name` on
PYTHONPATH, and from an installed distribution's `graft.strategies` entry point (a dist-info
on sys.path, as pip leaves it), which also puts it in `algorithms.available()` and
`graft config show`. The strategy is CONTRIBUTING's graft-topk example, written elsewhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from run_configs import PLANNED_GRID, small_config

from algorithms.training.run_config import config_from_dict
from benchmarks.compare.cells import plan_cells
from benchmarks.compare.grid import grid_from_dict

REPO = Path(__file__).resolve().parents[3]


def example() -> str:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("## Building on GRAFT", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)[0]


def graft(args: list[str], plugins: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), str(REPO)])}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def trained_steps(run_dir: Path) -> list[tuple[int, str]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return sorted({(row["step"], row["agent"]) for row in rows})


def run_file(tmp_path: Path, algorithm: str, **options: object) -> Path:
    config = small_config(tmp_path / "run", "graft").to_dict()
    config["algorithm"] = algorithm
    config["algorithm_options"].update(options)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


STEPS = [(0, "tiny-a"), (0, "tiny-b"), (1, "tiny-a"), (1, "tiny-b")]


@pytest.mark.parametrize("reference", ["topk_outside:GraftTopK", "topk_outside:graft-topk"])
def test_a_strategy_on_pythonpath_trains_by_module_and_name(reference, tiny_pair_paths, tmp_path):
    plugins = tmp_path / "elsewhere"
    plugins.mkdir()
    (plugins / "topk_outside.py").write_text(example(), encoding="utf-8")
    config = run_file(tmp_path, reference, topk=1, delta=0.0)
    done = graft(["train", "--config", str(config), "--set", "steps=2"], plugins)
    assert done.returncode == 0, done.stderr[-3000:]
    assert trained_steps(tmp_path / "run") == STEPS
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["algorithm"] == reference and saved["algorithm_options"]["topk"] == 1


def test_an_unknown_reference_is_one_line_naming_it(tmp_path):
    plugins = tmp_path / "elsewhere"
    plugins.mkdir()
    (plugins / "topk_outside.py").write_text(example(), encoding="utf-8")
    config = run_file(tmp_path, "topk_outside:GraftTopk")
    done = graft(["config", "validate", str(config)], plugins)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "algorithm: algorithm 'topk_outside:GraftTopk'" in done.stderr
    assert "did you mean 'GraftTopK'" in done.stderr


def test_an_installed_entry_point_is_listed_shown_and_trains(tiny_pair_paths, tmp_path):
    site = tmp_path / "site"
    dist = site / "graft_topk_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "graft_topk_plugin.py").write_text(example(), encoding="utf-8")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: graft-topk-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[graft.strategies]\ngraft-topk = graft_topk_plugin:GraftTopK\n"
    )
    listed = subprocess.run(
        [sys.executable, "-c", "import algorithms; print(algorithms.available())"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "'graft-topk'" in listed.stdout and "'graft-topk-no-floor'" in listed.stdout
    shown = graft(["config", "show"], site)
    assert shown.returncode == 0 and "algorithm_options.topk " in shown.stdout
    config = run_file(tmp_path, "graft-topk", topk=1)
    done = graft(["train", "--config", str(config)], site)
    assert done.returncode == 0, done.stderr[-3000:]
    assert trained_steps(tmp_path / "run") == STEPS


@pytest.fixture
def outside_module(registries, tmp_path, monkeypatch) -> Iterator[str]:
    """CONTRIBUTING's example as module `topk_inproc` on sys.path, imported by the test only."""
    (tmp_path / "topk_inproc.py").write_text(example(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "topk_inproc"
    sys.modules.pop("topk_inproc", None)


def test_a_reference_works_in_set_overrides_and_in_a_grid(outside_module, tmp_path):
    base = small_config(tmp_path / "run", "grpo").to_dict()
    config = config_from_dict(
        base, [f"algorithm={outside_module}:GraftTopK", "algorithm_options.topk=2"]
    )
    assert (config.algorithm, config.algorithm_options["topk"]) == (
        f"{outside_module}:GraftTopK",
        2,
    )
    grid = {
        **PLANNED_GRID,
        "algorithms": [
            {"name": f"{outside_module}:graft-topk", "label": "top-k", "options": {"topk": 1}}
        ],
    }
    cells = plan_cells(grid_from_dict(grid), tmp_path / "out")
    assert [c.cell_id for c in cells] == ["top-k/tiny-a+tiny-b/seed0"]
    assert cells[0].hash_inputs["train"]["resolved_algorithm"]["topk"] == 1
