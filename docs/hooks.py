"""mkdocs hook: fills the generated blocks of the docs pages at build time.

A page holding `<!-- generated: NAME -->` gets that marker replaced by text generated from
the code: `config-reference` (the run-config and grid-file schemas) and `registry` (the
registry table) from `benchmarks.reference`, and `metrics` (what each logged metric means)
from `algorithms.training.metric_docs`. A marker with no generator fails the build.

Links that leave docs/ for the code (`[select_exchange](../algorithms/core/selection.py)`) work
when the markdown is read in the repository (tests/test_docs_links.py checks they resolve), but
the site holds no source files: there they become the link's text with its path
(`select_exchange` (`algorithms/core/selection.py`)), so strict mode still fails on every
broken link inside the site.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import Any

from algorithms.training.metric_docs import metrics_page
from benchmarks.reference import config_reference, registry_table

GENERATORS: dict[str, Callable[[str], str]] = {
    "config-reference": lambda where: config_reference(),
    "registry": lambda where: registry_table(),
    "metrics": lambda where: metrics_page(),
}
MARKER = re.compile(r"<!-- generated: ([\w-]+) -->")
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def fill(markdown: str, where: str) -> str:
    """`markdown` (the page at `where`, relative to docs/) with each generated-block marker
    replaced by its generator's text."""

    def generated(match: re.Match[str]) -> str:
        if match[1] not in GENERATORS:
            known = sorted(GENERATORS)
            raise ValueError(f"{where}: unknown generated block {match[1]!r}; known: {known}")
        return GENERATORS[match[1]](where)

    return MARKER.sub(generated, markdown)


def unlink_source(markdown: str, where: str) -> str:
    """`markdown` (the page at `where`, relative to docs/) with each relative link that leaves
    docs/ replaced by its text and the repository path it points at."""

    def outside(match: re.Match[str]) -> str:
        target = match[2]
        if "://" in target or target.startswith("/"):
            return match[0]
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(where), target))
        if not resolved.startswith("../"):
            return match[0]
        return f"{match[1]} (`{resolved[3:]}`)"

    return LINK.sub(outside, markdown)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    return unlink_source(fill(markdown, page.file.src_uri), page.file.src_uri)
