"""CONTRIBUTING.md's worked strategy example (graft-topk, "Building on GRAFT") as the tests
load it: the module's text, under its own names or under others. Tests that load it beside
the package use other names, since following the recipe adds the same example to the package
(algorithms/exchange/graft_topk.py): its strategy, entries and option would clash."""

from __future__ import annotations

import re
from pathlib import Path

CONTRIBUTING = Path(__file__).resolve().parents[1] / "CONTRIBUTING.md"
NAME, OPTION = "graft-topk", "topk"


def topk_example(name: str = NAME, option: str = OPTION) -> str:
    """The example's module text with its strategy (and entry prefix) `name` and its option
    `option` (neither may contain the word 'topk' unless they are the example's own)."""
    text = CONTRIBUTING.read_text(encoding="utf-8")
    section = text.split("## Building on GRAFT", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)[0]
    return re.sub(rf"\b{OPTION}\b", option, code.replace(NAME, name))
