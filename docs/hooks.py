"""mkdocs hook: fills the generated blocks of the docs pages at build time.

A page holding `<!-- generated: NAME -->` gets that marker replaced by `benchmarks.reference`'s
text: `config-reference` (the run-config and grid-file schemas) and `registry` (the registry
table). A marker with no generator fails the build.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from benchmarks.reference import config_reference, registry_table

GENERATORS: dict[str, Callable[[], str]] = {
    "config-reference": config_reference,
    "registry": registry_table,
}
MARKER = re.compile(r"<!-- generated: ([\w-]+) -->")


def fill(markdown: str, where: str) -> str:
    """`markdown` with each generated-block marker replaced by its generator's text."""

    def generated(match: re.Match[str]) -> str:
        if match[1] not in GENERATORS:
            raise ValueError(
                f"{where}: unknown generated block {match[1]!r}; known: {sorted(GENERATORS)}"
            )
        return GENERATORS[match[1]]()

    return MARKER.sub(generated, markdown)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    return fill(markdown, page.file.src_path)
