"""A strategy from outside the repository trains through `graft train`: by `module:Name` on
PYTHONPATH, and from an installed distribution's `graft.strategies` entry point (a dist-info
on sys.path, as pip leaves it), which also puts it in `algorithms.available()` and
`graft config show`; a broken entry point is skipped with one line and named when used; a
reference names what its module defines. The strategy is CONTRIBUTING's graft-topk example,
written elsewhere as graft-outside / outside_k (the recipe's trial adds graft-topk itself to
the package, which these subprocesses import)."""

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
from worked_example import topk_example

from algorithms.training.run_config import config_from_dict
from benchmarks.compare.cells import plan_cells
from benchmarks.compare.grid import grid_from_dict

REPO = Path(__file__).resolve().parents[3]


NAME, OPTION = "graft-outside", "outside_k"


def example() -> str:
    return topk_example(NAME, OPTION)


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


@pytest.mark.parametrize("reference", ["topk_outside:GraftTopK", f"topk_outside:{NAME}"])
def test_a_strategy_on_pythonpath_trains_by_module_and_name(reference, tiny_pair_paths, tmp_path):
    plugins = tmp_path / "elsewhere"
    plugins.mkdir()
    (plugins / "topk_outside.py").write_text(example(), encoding="utf-8")
    config = run_file(tmp_path, reference, outside_k=1, delta=0.0)
    done = graft(["train", "--config", str(config), "--set", "steps=2"], plugins)
    assert done.returncode == 0, done.stderr[-3000:]
    assert trained_steps(tmp_path / "run") == STEPS
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["algorithm"] == reference and saved["algorithm_options"][OPTION] == 1


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
    site = installed(tmp_path / "site", example(), f"{NAME} = graft_topk_plugin:GraftTopK")
    listed = python("import algorithms; print(algorithms.available())", site)
    assert f"'{NAME}'" in listed.stdout and f"'{NAME}-no-floor'" in listed.stdout
    shown = graft(["config", "show"], site)
    assert shown.returncode == 0 and f"algorithm_options.{OPTION} " in shown.stdout
    config = run_file(tmp_path, NAME, outside_k=1)
    done = graft(["train", "--config", str(config)], site)
    assert done.returncode == 0, done.stderr[-3000:]
    assert trained_steps(tmp_path / "run") == STEPS


def installed(site: Path, module: str, entry: str, package: str = "graft_topk_plugin") -> Path:
    """`site` holding module `package` (text `module`) as an installed distribution of that
    name with the `graft.strategies` entry point `entry`, as pip leaves an installed
    package."""
    dist = site / f"{package}-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / f"{package}.py").write_text(module, encoding="utf-8")
    name = package.replace("_", "-")
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[graft.strategies]\n{entry}\n")
    return site


def python(code: str, *sites: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, sites), str(REPO)])},
        capture_output=True,
        text=True,
        timeout=300,
    )


USE = "import algorithms; print(algorithms.available()); algorithms.preset({name!r})"
# A strategy really named `topk`, from a plugin of its own.
REAL_TOPK = """from dataclasses import replace

from algorithms.exchange import register_strategy
from algorithms.exchange.graft import GraftExchange
from algorithms.registry import preset, register


@register_strategy("topk")
class TopK(GraftExchange):
    \"\"\"GRAFT under the name topk.\"\"\"


register("topk")(lambda: replace(preset("graft"), exchange="topk"))
"""


def warnings_about(module: str, done: subprocess.CompletedProcess) -> list[str]:
    """The warnings about entry points into `module`: whatever else is installed here may
    warn too."""
    return [line for line in done.stderr.splitlines() if "Warning" in line and module in line]


def entry_point_line(name: str, problem: str) -> str:
    """The one-line problem of entry point `name` into graft_topk_plugin:GraftTopK, up to the
    distribution, whose name importlib.metadata may spell in more than one way."""
    return (
        rf"entry point {name!r} = 'graft_topk_plugin:GraftTopK' of group 'graft\.strategies' "
        rf"\(distribution [^)]+\) {re.escape(problem)}"
    )


@pytest.mark.parametrize(
    ("module", "entry", "problem"),
    [
        (
            "raise RuntimeError('no GPU here')\n",
            "broken = graft_topk_plugin:GraftTopK",
            "failed to load: RuntimeError: no GPU here",
        ),
        (
            example(),
            "topk = graft_topk_plugin:GraftTopK",
            f"registers no strategy named 'topk' (it registers strategy {NAME!r}); name the "
            "entry point after the strategy it registers",
        ),
    ],
)
def test_a_broken_entry_point_is_one_warning_and_the_error_where_it_is_used(
    module, entry, problem, tmp_path
):
    name = entry.split(" =")[0]
    done = python(USE.format(name=name), installed(tmp_path / "site", module, entry))
    assert "'grpo'" in done.stdout  # every other algorithm is still there
    named = entry_point_line(name, problem)
    warned = warnings_about("graft_topk_plugin:", done)
    assert len(warned) == 1 and re.search(rf"RuntimeWarning: {named}; skipped$", warned[0]), warned
    assert done.returncode == 1
    assert re.fullmatch(rf"ValueError: algorithm {name!r}: {named}", done.stderr.splitlines()[-1])


def test_an_entry_point_is_judged_by_what_it_registers_not_by_other_plugins(tmp_path):
    """A strategy really named topk, from another plugin loaded first, does not make an entry
    point named topk that registers another strategy pass."""
    real = installed(tmp_path / "real", REAL_TOPK, "topk = real_topk:TopK", "real_topk")
    wrong = installed(tmp_path / "wrong", example(), "topk = graft_topk_plugin:GraftTopK")
    done = python(USE.format(name="topk"), real, wrong)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'topk'" in done.stdout and f"'{NAME}'" in done.stdout
    assert warnings_about("real_topk:", done) == []
    problem = f"registers no strategy named 'topk' (it registers strategy {NAME!r})"
    (warned,) = warnings_about("graft_topk_plugin:", done)
    assert re.search(entry_point_line("topk", problem), warned), warned


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
        base, [f"algorithm={outside_module}:GraftTopK", f"algorithm_options.{OPTION}=2"]
    )
    assert (config.algorithm, config.algorithm_options[OPTION]) == (
        f"{outside_module}:GraftTopK",
        2,
    )
    grid = {
        **PLANNED_GRID,
        "algorithms": [
            {"name": f"{outside_module}:{NAME}", "label": "top-k", "options": {OPTION: 1}}
        ],
    }
    cells = plan_cells(grid_from_dict(grid), tmp_path / "out")
    assert [c.cell_id for c in cells] == ["top-k/tiny-a+tiny-b/seed0"]
    assert cells[0].hash_inputs["train"]["resolved_algorithm"][OPTION] == 1


def test_a_reference_names_only_what_its_module_defines(outside_module):
    import algorithms

    assert algorithms.preset(f"{outside_module}:{NAME}").exchange == NAME
    for reference, origin in [
        ("os:graft", "algorithms.presets"),  # not plain GRAFT under another module's name
        (f"{outside_module}:graft", "algorithms.presets"),  # a typo'd module path
        ("algorithms.exchange.sgt:GraftExchange", None),  # imported there, defined elsewhere
    ]:
        with pytest.raises(ValueError) as error:
            algorithms.preset(reference)
        message = str(error.value)
        assert message.startswith(f"algorithm {reference!r}: ") and "\n" not in message
        if origin:
            module = reference.split(":")[0]
            assert f"'graft' is defined by {origin!r}, not by {module!r}" in message
