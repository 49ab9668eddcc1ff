"""The README is the front door and stays true: at most 200 lines, its registry table built
from the registry, its Python blocks the ones the tests run, and every relative link in it and
in docs/**/*.md resolving to a file inside the repository.

    python -m benchmarks.reference     # rewrites README.md's registry block from the registry
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from benchmarks.reference import SHIPPED, registry_block, registry_rows, registry_table

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 200
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"`[^`\n]*`")
EXTERNAL = ("http://", "https://", "mailto:")


def links(text: str) -> Iterator[str]:
    """The targets of a markdown text's links and images, outside code."""
    prose = INLINE_CODE.sub("", CODE.sub("", text))
    yield from (match[1] for match in LINK.finditer(prose))


def broken_links(root: Path, files: list[Path]) -> list[str]:
    """`file: target` for each relative link that names no file or folder inside `root`."""
    found = []
    for file in files:
        for target in links(file.read_text(encoding="utf-8")):
            path = target.split("#", 1)[0]
            if target.startswith(EXTERNAL) or not path:
                continue
            resolved = (file.parent / path).resolve()
            if not resolved.is_relative_to(root.resolve()) or not resolved.exists():
                found.append(f"{file.relative_to(root).as_posix()}: {target}")
    return found


def documents(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def test_the_readme_is_at_most_200_lines():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def shipped_registry_table() -> str:
    """The registry table of a fresh process: the shipped entries only, not those that tests
    of this session registered (test_algorithm_registry adds one for good)."""
    code = "from benchmarks.reference import registry_table; print(registry_table())"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    return done.stdout.rstrip("\n")


def test_the_readme_registry_table_is_built_from_the_registry():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert registry_block(text) == shipped_registry_table(), (
        "README.md's registry table is stale: run `python -m benchmarks.reference`"
    )


def test_the_registry_table_has_a_row_per_shipped_entry(registries):
    import algorithms
    from algorithms.registry import registered_from

    shipped = [name for name in algorithms.available() if registered_from(name) == SHIPPED]
    assert [row[0] for row in registry_rows()] == shipped and "graft" in shipped
    table = registry_table()
    assert "| `graft-no-floor` | `graft` | `delta=0.0` |" in table  # the option it changes
    assert "| `grpo` | `none` | – |" in table  # the baseline changes nothing


def test_an_entry_registered_elsewhere_needs_no_readme_edit(registries):
    """A strategy module's (or a plugin's) own entry is listed by `algorithms.available()`
    and `graft config show`, not by the README's table: adding one leaves the README current."""
    import algorithms

    before = registry_table()
    algorithms.register("test-contributed")(lambda: algorithms.preset("graft"))
    assert "test-contributed" in algorithms.available()
    assert registry_table() == before


def test_every_relative_link_in_the_readme_and_the_docs_resolves_inside_the_repository():
    assert broken_links(REPO, documents(REPO)) == []


def test_a_missing_file_and_a_link_out_of_the_repository_are_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("# here\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/here.md#top) [gone](docs/gone.md) [out](../shared/docs/SPEC.md)\n"
        "![fig](docs/fig.png) [web](https://example.org) `[code](nowhere.md)`\n"
        "```\n[block](nowhere.md)\n```\n"
    )
    assert broken_links(tmp_path, documents(tmp_path)) == [
        "README.md: docs/gone.md",
        "README.md: ../shared/docs/SPEC.md",
        "README.md: docs/fig.png",
    ]


def test_the_readme_python_blocks_are_those_the_tests_run():
    """tests/graft_env/rewards/test_pool_main_guard.py runs the first block after "## Using it",
    tests/algorithms/training/test_readme_training.py the first after "Training from Python";
    together they are the README's example of about ten lines."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Using it", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 2 and "Training from Python" in section.split(blocks[0], 1)[1]
    assert 'algorithms.make("graft")' in blocks[0] and "Trainer(config).train()" in blocks[1]
    code_lines = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert len(code_lines) <= 12
