"""The repository explains itself: docs/algorithm.md and docs/architecture.md link only inside
the repository, every link resolves (files, and headings of Markdown files), and every code
name a link shows (`select_exchange`, `Algorithm.loss`) is defined in the file it points at."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = ("docs/algorithm.md", "docs/architecture.md")
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
CODE_NAME = re.compile(r"^`(?:algorithms\.)?([A-Za-z_][\w.]*)(?:\(.*\))?`$")


def _links(doc: str) -> list[tuple[str, str]]:
    return LINK.findall((REPO / doc).read_text(encoding="utf-8"))


def _anchors(markdown: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", markdown.read_text(encoding="utf-8"), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}


def _defined(path: Path) -> set[str]:
    """Every class, function and `Class.method` a Python file defines at its top levels."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    return names


@pytest.mark.parametrize("doc", DOCS)
def test_every_link_stays_inside_the_repository_and_resolves(doc: str) -> None:
    links = _links(doc)
    assert len(links) > 20, doc
    for _text, target in links:
        assert "://" not in target and not target.startswith("/"), (doc, target)
        file_part, _, anchor = target.partition("#")
        path = ((REPO / doc).parent / file_part).resolve()
        assert path.is_relative_to(REPO), (doc, target)
        assert path.exists(), (doc, target)
        if anchor:
            assert anchor in _anchors(path), (doc, target)


@pytest.mark.parametrize("doc", DOCS)
def test_every_linked_code_name_is_defined_where_the_link_points(doc: str) -> None:
    checked = 0
    for text, target in _links(doc):
        name = CODE_NAME.match(text)
        path = (REPO / doc).parent / target.partition("#")[0]
        if name is None or path.suffix != ".py":
            continue
        defined = _defined(path.resolve())
        assert name.group(1) in defined, (doc, text)
        checked += 1
    assert checked > 10, doc


# The paper's sections algorithm.md cites (§4.1 balanced exchange, §4.2 peer-last order, §6
# the baselines and variants); its own headings are "section N", never §N.
PAPER_SECTIONS = {"§4.1", "§4.2", "§6"}


def test_every_section_sign_in_the_algorithm_page_is_the_paper_s():
    text = (REPO / "docs" / "algorithm.md").read_text(encoding="utf-8")
    assert set(re.findall(r"§\d+(?:\.\d+)?", text)) <= PAPER_SECTIONS
