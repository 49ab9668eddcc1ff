"""No text a user reads cites a tracker issue or a file the repository does not ship: the
README, the docs pages (the study records under docs/results and docs/study keep theirs),
config comments, every `graft` help text, the generated reference pages, and every string
literal the code can print (help, errors, command output) other than docstrings."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

from benchmarks import cli
from benchmarks.commands.config_show import render, shown_keys
from benchmarks.reference import config_reference, registry_table

REPO = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"\bissues? #?\d|\(issue\b|GRAFT-SPEC|\bSPEC §|DESIGN\.md", re.IGNORECASE)
# Study records: what a pre-registered study said and found, as committed.
RECORDS = ("docs/results/", "docs/study/", "docs/changelog.md")
# Their report generators: the strings that write those records.
RECORD_CODE = ("benchmarks/study/",)
HELP_ARGV = [
    [],
    ["data"],
    ["data", "show"],
    ["config"],
    ["config", "show"],
    ["config", "validate"],
    *([name] for name in cli.COMMAND_MODULES),
]


def citations(text: str) -> list[str]:
    """Each line of `text` that cites an issue or an unshipped file."""
    return [line.strip() for line in text.splitlines() if CITATION.search(line)]


def user_files() -> list[Path]:
    pages = [REPO / "README.md", *(REPO / "docs").rglob("*.md")]
    configs = [*(REPO / "configs").rglob("*.yaml"), *(REPO / "configs").rglob("*.yml")]
    return [
        path
        for path in pages + configs
        if not path.relative_to(REPO).as_posix().startswith(RECORDS)
    ]


def test_the_pattern_finds_what_it_is_for():
    cited = ["as before issue 37", "(issue 16)", "GRAFT-SPEC §10", "SPEC §9", "issue #8"]
    assert all(citations(text) for text in cited)
    assert not citations("the paper's §6.2; reissued 3 times; Table 2")


def test_readme_docs_and_config_comments_cite_no_issue():
    files = user_files()
    assert any(path.name == "README.md" for path in files) and len(files) > 20
    found = {
        str(path.relative_to(REPO)): citations(path.read_text(encoding="utf-8")) for path in files
    }
    assert not {path: lines for path, lines in found.items() if lines}


@pytest.mark.parametrize("argv", HELP_ARGV, ids=" ".join)
def test_help_texts_cite_no_issue(argv, capsys):
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    assert not citations(capsys.readouterr().out)


def test_generated_pages_and_config_show_cite_no_issue():
    for grid in (False, True):
        assert not citations(render(shown_keys(grid), "lines"))
    assert not citations(config_reference()) and not citations(registry_table())


def printable_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each string literal in a module that is not a bare expression
    statement (docstrings, and strings under an attribute): help, errors, printed lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bare = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare
    ]


def test_strings_the_code_prints_cite_no_issue():
    modules = [
        path
        for package in ("graft_env", "algorithms", "benchmarks")
        for path in (REPO / package).rglob("*.py")
        if not path.relative_to(REPO).as_posix().startswith(RECORD_CODE)
    ]
    assert len(modules) > 100
    found = [
        f"{path.relative_to(REPO)}:{line}: {text[:80]!r}"
        for path in modules
        for line, text in printable_strings(path)
        if CITATION.search(text)
    ]
    assert not found


def test_the_api_reference_docstrings_cite_no_issue():
    """docs/reference/api.md renders these objects' docstrings (mkdocstrings)."""
    page = (REPO / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    names = re.findall(r"^::: ([\w.]+)", page, flags=re.MULTILINE)
    assert len(names) == 4
    for name in names:
        module, _, attribute = name.rpartition(".")
        target = getattr(importlib.import_module(module), attribute)
        methods = [getattr(target, m) for m in vars(target) if m[0] != "_"]
        members = [target, *filter(callable, methods)]
        assert not citations("\n".join(inspect.getdoc(m) or "" for m in members)), name
