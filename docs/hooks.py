"""mkdocs hook: fills the generated blocks of the docs pages at build time.

A page holding `<!-- generated: NAME -->` gets that marker replaced by text generated from
the code: `config-reference` (the run-config and grid-file schemas) and `registry` (the
registry table) from `benchmarks.reference`, `metrics` (what each logged metric means) from
`algorithms.training.metric_docs`, and `memory-per-phase` (the figure of `graft plan`'s memory
plan of MEMORY_CONFIG, drawn into the site as MEMORY_PNG). A marker with no generator fails
the build.

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
from pathlib import Path
from typing import Any

from algorithms.training.metric_docs import metrics_page
from benchmarks.reference import config_reference, memory_per_phase_png, registry_table

MEMORY_CONFIG, MEMORY_GPUS = "configs/paper_smollm3_qwen3_local.yaml", (141.0, 4)
MEMORY_PNG = "generated/memory_per_phase.png"


def _memory_image(where: str) -> str:
    path = posixpath.relpath(MEMORY_PNG, posixpath.dirname(where) or ".")
    gib, gpus = MEMORY_GPUS
    return (
        f"![Memory per GPU and phase, `graft plan {MEMORY_CONFIG} --gpu-memory {gib:g} "
        f"--gpus {gpus}`]({path})"
    )


GENERATORS: dict[str, Callable[[str], str]] = {
    "config-reference": lambda where: config_reference(),
    "registry": lambda where: registry_table(),
    "metrics": lambda where: metrics_page(),
    "memory-per-phase": _memory_image,
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


def on_files(files: Any, config: Any) -> Any:
    """Adds the memory figure to the site's files (mkdocs imported here: the tests load this
    module without the docs extra)."""
    from mkdocs.structure.files import File

    root = Path(config["config_file_path"]).parent
    gib, gpus = MEMORY_GPUS
    png = memory_per_phase_png(root / MEMORY_CONFIG, gib, gpus)
    files.append(File.generated(config, MEMORY_PNG, content=png))
    return files


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    return unlink_source(fill(markdown, page.file.src_uri), page.file.src_uri)
