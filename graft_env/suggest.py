""""Did you mean": the closest valid names to a mistyped one, for one-line errors.

`did_you_mean("grpo-n8", available())` -> `"; did you mean 'grpo-n-8'?"`, or `""` when no
valid name is close (difflib's ratio >= `cutoff`), so an error message can append it as is.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """`"; did you mean 'x'?"` (or `'x' or 'y'`) for the valid names closest to `word`, else
    `""`."""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=2, cutoff=cutoff)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(name) for name in close) + "?"
