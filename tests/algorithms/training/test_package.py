"""The wheel is what a user installs: built from this checkout and installed into a fresh
virtualenv, it carries the shipped configs, `graft --version` and `graft env`, and trains
from a directory that is not the checkout.

The fresh venv has no pip and no packages of its own; a .pth file puts this environment's
site-packages after its own, so the dependencies are reused (nothing is downloaded) while
`graft` itself comes from the wheel: a .pth file's folder is added to sys.path, but the
.pth files inside it are not read, so this checkout's editable install stays out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
# What the wheel is built from: a copy, so setuptools' build/ folder (which keeps files a
# later build no longer has) is a fresh one and the checkout stays untouched
SOURCES = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "graft_env",
    "algorithms",
    "benchmarks",
    "configs",
)


PIP = (sys.executable, "-m", "pip", "-q")


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _fresh_venv(tmp_path: Path) -> Path:
    """A venv with the wheel of this checkout installed, and this environment's packages
    behind it; returns its bin folder."""
    source, wheels = tmp_path / "source", tmp_path / "wheels"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(REPO / name, source / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(REPO / name, source / name)
    built = subprocess.run(  # the build backend of this environment: no download
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = wheels.glob("graft_rlvr-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "benchmarks/configs/testbed_pair_graft.yaml" in names
    assert "benchmarks/configs/grids/study.yaml" in names
    assert any(name.endswith("licenses/LICENSE") for name in names)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "graft-dependencies.pth").write_text(ours + "\n")
    installed = subprocess.run(
        [*PIP, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    return venv / "bin"


def test_the_wheel_trains_from_another_directory(tmp_path, tiny_pair_paths):
    bin_dir = _fresh_venv(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    graft = str(bin_dir / "graft")

    where = _run(
        [str(bin_dir / "python"), "-c", "import benchmarks; print(benchmarks.__file__)"],
        elsewhere,
        env,
    )
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout + where.stderr
    version = _run([graft, "--version"], elsewhere, env)
    assert version.returncode == 0 and version.stdout.startswith("graft 0.1.0"), version
    report = _run([graft, "env"], elsewhere, env)
    assert report.returncode == 0, report.stderr
    assert "torch_cpu_capability" in report.stdout and "transformers" in report.stdout

    # A bare `graft train` reads the default config from the wheel: a run_dir that is a
    # file is refused by the first check after the config is read, before any model loads.
    a_file = elsewhere / "a_file"
    a_file.write_text("")
    bare = _run([graft, "train", "--set", f"run_dir={a_file}"], elsewhere, env)
    assert bare.returncode == 2 and f"run_dir: {a_file} is a file" in bare.stderr, bare.stderr

    # Two steps of a shipped config named as the README names it, from outside the checkout.
    args = ["--set", "steps=2", "--set", "run_dir=run", "--set", "progress=false"]
    trained = _run(
        [graft, "train", "--config", "configs/tiny_pair_graft.yaml", *args], elsewhere, env
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "reward " in trained.stdout
    resolved = yaml.safe_load((elsewhere / "run" / "resolved_config.yaml").read_text())
    assert resolved["steps"] == 2 and resolved["algorithm_options"]["eps_high"] == 0.28
    assert (elsewhere / "run" / "checkpoints" / "step_000002").is_dir()
