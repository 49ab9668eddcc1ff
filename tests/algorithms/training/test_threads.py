"""Threads of a run (`graft_env.threads`): one by default, the `threads` setting applied
before any model loads, passive OpenMP waiting set before torch starts, and a default run
that reruns bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from run_configs import small_config
from safetensors.torch import load_file

import algorithms.training.loop
from benchmarks import cli
from graft_env.threads import process_defaults, resolve_threads

REPO = Path(__file__).resolve().parents[3]
OMP_VARS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")

# Records the OpenMP variables at the moment torch is first imported, then runs CODE.
SPY = """
import importlib.abc, json, os, sys
seen = {}
class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.update({k: os.environ.get(k) for k in %r})
sys.meta_path.insert(0, Spy())
%s
print(json.dumps(seen))
"""


def test_the_run_threads_come_from_the_setting_then_the_environment_then_one():
    assert resolve_threads(None, {}) == 1
    assert resolve_threads(None, {"OMP_NUM_THREADS": ""}) == 1
    assert resolve_threads(None, {"OMP_NUM_THREADS": "3"}) == 3
    assert resolve_threads(None, {"OMP_NUM_THREADS": "4,2"}) == 4
    assert resolve_threads(2, {"OMP_NUM_THREADS": "3"}) == 2
    for bad in ("lots", "0", "-2"):
        with pytest.raises(ValueError, match=rf"^OMP_NUM_THREADS='{bad}' is not a thread count"):
            resolve_threads(None, {"OMP_NUM_THREADS": bad})


def test_process_defaults_keep_what_the_user_set():
    environ = {"OMP_WAIT_POLICY": "ACTIVE"}
    process_defaults(environ)
    assert environ == {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "1"}
    environ = {"OMP_NUM_THREADS": "2"}
    process_defaults(environ)
    assert environ == {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}


def _config_file(tmp_path: Path, name: str, raw: dict | None = None, **extra) -> Path:
    """A small graft run's config file; `raw` keys are written as given, unvalidated."""
    data = small_config(tmp_path / name, "graft", **extra).to_dict()
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**data, **(raw or {})}))
    return path


@pytest.mark.parametrize(
    "entry",
    [
        # `graft train` with a valid config (its loop imports torch) that --fresh refuses
        "from benchmarks.cli import main; main(['train', '--config', sys.argv[1], '--fresh'])",
        # what `python -m benchmarks.perf.step_time` imports first
        "import benchmarks.perf.step_time",
    ],
)
def test_entry_points_wait_passively_and_use_one_thread_from_before_torch_loads(entry, tmp_path):
    notes = tmp_path / "notes.txt"  # not a run directory: --fresh refuses it
    notes.write_text("keep")
    config = _config_file(tmp_path, "bad", raw={"run_dir": str(notes)})
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARS}
    code = SPY % (OMP_VARS, entry)
    done = subprocess.run(
        [sys.executable, "-c", code, str(config)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}, done.stderr


def test_a_bad_threads_setting_is_one_line_before_any_model_loads(tmp_path, capsys):
    config = _config_file(tmp_path, "run")
    assert cli.main(["train", "--config", str(config), "--set", "threads=0"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "threads: 0 must be >= 1" in error, error
    assert not (tmp_path / "run").exists()


@pytest.fixture
def two_torch_threads():
    """Where an unconfigured process on these 2 cores starts; the run must not keep it."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("overrides", "expected"), [((), 1), (("threads=3",), 3)])
def test_a_run_uses_its_threads_from_before_the_models_load(
    overrides, expected, tmp_path, monkeypatch, two_torch_threads, tiny_pair_paths
):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen = []

    class Recording(algorithms.training.loop.Trainer):
        def __init__(self, *args, **kwargs):
            seen.append(("load", torch.get_num_threads()))
            super().__init__(*args, **kwargs)

        def run_step(self):
            seen.append(("step", torch.get_num_threads()))
            return super().run_step()

    monkeypatch.setattr(algorithms.training.loop, "Trainer", Recording)
    config = _config_file(tmp_path, "run", steps=1)
    sets = [arg for override in overrides for arg in ("--set", override)]
    assert cli.main(["train", "--config", str(config), *sets]) == 0
    assert seen == [("load", expected), ("step", expected)]


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    [final] = sorted((run_dir / "checkpoints").glob("step_*"))[-1:]
    return {
        f"{path.parent.name}/{key}": tensor
        for path in sorted(final.glob("*/*.safetensors"))
        for key, tensor in load_file(path).items()
    }


def _metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def test_two_default_runs_give_identical_weights_and_metrics(
    tmp_path, monkeypatch, two_torch_threads, tiny_pair_paths
):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    runs = []
    for name in ("first", "second"):
        assert cli.main(["train", "--config", str(_config_file(tmp_path, name))]) == 0
        runs.append(tmp_path / name)
    first, second = (_final_weights(run) for run in runs)
    assert first and sorted(first) == sorted(second)
    assert all(torch.equal(first[key], second[key]) for key in first)
    assert _metrics(runs[0]) == _metrics(runs[1])
    assert len(_metrics(runs[0])) == 4  # 2 steps x 2 agents
