"""CONTRIBUTING's recipe for a strategy, followed literally in a copy of the repository: its
worked example (graft-topk: its module and its test, as written there) added as the recipe's
two files, then the recipe's commands run there (its test, imports, options, the docs
checks and the registry matrices on the new entry), then the tests that load the same example
under other names beside it, and nothing else in the copy changed."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAME, MODULE = "graft-topk", "graft_topk"
# what a new strategy module must leave green without an edit elsewhere: the recipe runs them
REQUIRED = (
    "tests/test_import_layers.py",
    "tests/algorithms/training/test_option_schema.py",
    "tests/test_readme.py",
    "tests/benchmarks/test_config_show.py",
)
# the example loaded again, renamed, beside the package's copy (not its training runs: slow)
BESIDE = (
    "python -m pytest -q tests/algorithms/test_algorithm_graft_hooks.py "
    "tests/algorithms/training/test_strategy_plugins.py -k 'not trains'"
)


def section(title: str) -> str:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def recipe() -> tuple[dict[str, str], list[str]]:
    """The worked example's files (path -> text) and the recipe's commands, for graft-topk."""
    files = dict(
        re.findall(
            r"`([\w/]+\.py)`[^`]*?\n\n```python\n(.*?)```", section("Building on GRAFT"), re.S
        )
    )
    steps = re.search(r"```sh\n(.*?)```", section("Adding an exchange strategy"), re.S)[1]
    commands = [c.replace("<module>", MODULE).replace("<name>", NAME) for c in steps.splitlines()]
    return files, commands


def copy_of_repository(target: Path, without: Iterable[str] = ()) -> None:
    """The working tree's files (tracked and untracked, not ignored), less `without` (the
    recipe's files, where a checkout already has them: the trial itself), committed in a new
    repo."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in set(filter(None, listed)) - set(without):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    git = ["git", "-c", "user.name=recipe", "-c", "user.email=recipe@test"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "copy"]):
        subprocess.run([*git, *args], cwd=target, check=True, capture_output=True)


def test_the_recipe_adds_a_strategy_with_one_file_and_its_test(tmp_path):
    files, commands = recipe()
    assert sorted(files) == [
        f"algorithms/exchange/{MODULE}.py",
        f"tests/algorithms/test_algorithm_{MODULE}.py",
    ]
    assert len(commands) == 2 and all(c.startswith("python -m pytest ") for c in commands)
    assert all(path in commands[0].split() for path in REQUIRED), commands[0]
    copy = tmp_path / "repo"
    copy_of_repository(copy, without=files)
    for path, text in files.items():
        assert not (copy / path).exists(), path
        (copy / path).write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for command in [*commands, BESIDE]:
        args = [sys.executable, *shlex.split(command)[1:]]
        done = subprocess.run(args, cwd=copy, env=env, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, f"{command}\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
        assert " passed" in done.stdout and "error" not in done.stdout.splitlines()[-1], (
            done.stdout[-500:]
        )
        assert str(copy) in _imported_from(copy, env)
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=copy, capture_output=True, text=True
    )
    assert sorted(status.stdout.splitlines()) == sorted(f"?? {path}" for path in files)


def _imported_from(copy: Path, env: dict[str, str]) -> str:
    """Where the copy's interpreter imports `algorithms` from (the copy, not this checkout)."""
    probe = [sys.executable, "-c", "import algorithms; print(algorithms.__file__)"]
    return subprocess.run(probe, cwd=copy, env=env, capture_output=True, text=True).stdout
