"""trl_gpu_check as a GPU machine would run it: `--smoke` in an interpreter that sees only
torch, transformers and accelerate (with what they require), the script's `WHEELS` and the
checkout runs both stages, so the wheel list is complete and nothing else is imported; and
`--wheels` prints its pip commands with the standard library alone."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("trl")

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from benchmarks.perf import trl_gpu_check

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "perf" / "trl_gpu_check.py"
ON_THE_GPU_MACHINE = ("torch", "transformers", "accelerate")


def requirements(names: list[str]) -> set[str]:
    """`names` and every distribution they require, transitively, as installed here
    (markers evaluated, extras followed)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(name, frozenset[str]()) for name in names]
    while todo:
        name, extras = todo.pop()
        if (canonicalize_name(name), extras) in seen:
            continue
        seen.add((canonicalize_name(name), extras))
        for line in metadata.distribution(name).requires or []:
            requirement = Requirement(line)
            environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            marker = requirement.marker
            if marker is None or any(marker.evaluate(env) for env in environments):
                todo.append((requirement.name, frozenset(requirement.extras)))
    return {name for name, _ in seen}


def venv_of(names: set[str], folder: Path) -> Path:
    """A virtual environment (no pip, no system packages) whose site-packages links to the
    installed files of exactly the distributions `names`; its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site = folder / "lib" / version / "site-packages"
    for name in sorted(names):
        dist = metadata.distribution(name)
        root = Path(dist.locate_file(""))
        tops = {Path(str(file)).parts[0] for file in dist.files or []}
        for top in sorted(tops - {".."}):
            link = site / top
            if (root / top).exists() and not link.exists():
                link.symlink_to(root / top)
    return folder / "bin" / "python"


def test_the_listed_wheels_are_installed_here():
    """What `--wheels` fetches is installed here (TRL at its exact version; the others as
    pip resolved them, which may be newer than the listed release)."""
    assert trl_gpu_check.missing_wheels() == []
    assert trl_gpu_check.WHEELS[0] == f"trl=={trl_gpu_check.TRL_VERSION}"


def test_wheels_prints_both_commands_with_the_standard_library_alone():
    """-S -I: no site-packages and no PYTHONPATH, as on a machine where nothing is installed."""
    done = subprocess.run(
        [sys.executable, "-S", "-I", str(SCRIPT), "--wheels", "--python", "3.12"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    download, install = done.stdout.splitlines()
    assert download.startswith("pip download --dest wheels/ --no-deps --only-binary=:all: ")
    assert "--python-version 312 " in download
    assert install.startswith("pip install --no-index --find-links wheels/ ")
    for wheel in trl_gpu_check.WHEELS:
        assert f" {wheel}" in download and f" {wheel}" in install


def test_smoke_runs_both_stages_with_only_the_gpu_machine_s_packages(tmp_path):
    """Both stages finish on CPU: the live pair exchanges a group each way on every
    generation batch, and the paper-shaped step (tiny here) receives the peer's group and
    reports its update rate."""
    allowed = requirements(list(ON_THE_GPU_MACHINE)) | {
        canonicalize_name(wheel.split("==")[0]) for wheel in trl_gpu_check.WHEELS
    }
    python = venv_of(allowed, tmp_path / "venv")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    out = tmp_path / "out"
    done = subprocess.run(
        [str(python), "-m", "benchmarks.perf.trl_gpu_check", "--smoke", "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    stages = results["stages"]
    assert {name: stage["status"] for name, stage in stages.items()} == {
        "live": "ok",
        "step": "ok",
    }, done.stdout
    for agent, child in stages["live"]["children"].items():
        moved = [
            step["exchange/used_groups"]
            for step in child["steps"]
            if "exchange/used_groups" in step
        ]
        assert moved == [1.0, 1.0], (agent, child["steps"])  # 2 generation batches
    [step] = stages["step"]["children"].values()
    assert step["steps"][0]["exchange/used_groups"] == 1.0
    assert step["update_tokens"] == 2 * 4 * (16 + 32)  # 2 micro-batches of a 4-row group
    assert step["update_tokens_per_s"] > 0 and step["peak_rss_gib"] > 0


def test_a_stage_past_its_budget_is_killed_and_recorded_as_timed_out(tmp_path):
    """Half a second cannot even import torch: the child is killed and the stage's record
    says so, with what the child had written (its versions are not even there yet)."""
    options = argparse.Namespace(device="cpu", threads=1, smoke=True)
    record = trl_gpu_check.run_stage("step", 0.5, tmp_path, options)
    assert record["status"] == "timed out" and record["budget_s"] == 0.5
    assert record["exit_codes"] == {trl_gpu_check.RECEIVER: -9}  # SIGKILL
    assert record["seconds"] < 30
