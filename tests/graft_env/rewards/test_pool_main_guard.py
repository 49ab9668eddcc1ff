"""A plain script that verifies (env.step) without an `if __name__ == "__main__":` guard.

Forkserver and spawn processes import the main script again before they run. For the
verifier workers that meant: an unguarded script ran again in every worker up to its first
verify, which started a pool inside the worker (~110 lines of tracebacks for 2 workers,
then an error), and code from stdin had no file to import (`<stdin>`: every worker died).
The workers skip the main module now, so both verify, as does the README's example.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def readme_example() -> str:
    """The first ```python block of the README's "Using it" section, verbatim."""
    text = (REPO / "README.md").read_text().split("## Using it", 1)[1]
    return text.split("```python\n", 1)[1].split("```", 1)[0]


UNGUARDED = textwrap.dedent(
    r"""
    import gymnasium, graft_env

    env = gymnasium.make(
        "graft_env/MathReasoning-v0", dataset="procedural",
        dataset_options={"size": 5, "difficulty": 1},
    )
    env.reset(seed=0)
    print("step", env.step("so \\boxed{3}")[1])
    """
)


def _run(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_an_unguarded_script_verifies(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    done = _run([str(script)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "step 0.0"  # once: no worker ran the script again
    assert "Traceback" not in done.stderr


def test_the_same_script_with_the_guard_verifies(tmp_path):
    script = tmp_path / "guarded.py"
    body = textwrap.indent(UNGUARDED.split("\n", 2)[2], "    ")
    script.write_text(f"import gymnasium, graft_env\n\nif __name__ == '__main__':\n{body}")
    done = _run([str(script)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "step 0.0"


def test_code_from_stdin_needs_no_guard(tmp_path):
    """No file to import again: the workers start without the main module."""
    done = _run(["-"], tmp_path, stdin=UNGUARDED)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "step 0.0"


def test_the_readme_example_steps_with_a_reward(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    done = _run([str(script)], REPO)  # the README's commands run in the checkout
    assert done.returncode == 0, done.stderr
    reward, status, extracted = done.stdout.split(maxsplit=2)
    assert (reward, status) == ("1.0", "ok") and extracted
