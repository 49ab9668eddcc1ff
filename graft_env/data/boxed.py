"""Find the final answer a solution put in `\\boxed{...}` (or `\\fbox{...}`).

Both the gold answers of MATH-style datasets and model responses mark the final
answer with a box, so the data loaders and the reward share this one function.
Responses can be long and adversarial (a model may emit a megabyte of braces), so
the scan is linear: one regex pass to find the last box command, one pass over the
braces after it.
"""

from __future__ import annotations

import re

# `\boxed` / `\fbox` as whole control words: `\boxedx` is a different macro.
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_SPACES = re.compile(r"\s*")
# Inside the argument, `\{`, `\}` and `\\` are escapes, not grouping braces.
_BRACE_OR_ESCAPE = re.compile(r"\\.|[{}]", re.DOTALL)
# An unbraced argument (`\boxed 5`, `\boxed \frac12`): one word, which ends at
# whitespace, `$` or the next command's backslash.
_BARE_ARGUMENT = re.compile(r"\\?[^\s$\\]+")
_TRAILING_PUNCTUATION = ".,;:"


def extract_last_boxed(text: str) -> str | None:
    """Return the content of the last `\\boxed{...}` or `\\fbox{...}` in `text`.

    Nested braces are matched (`\\boxed{\\frac{1}{2}}` gives `\\frac{1}{2}`); an
    unbraced argument (`\\boxed 5.`) gives its word without trailing punctuation.
    Returns None when there is no box, or when the last box is unbalanced or has no
    argument: an answer that was cut off is not an answer, so no earlier box is
    used in its place.
    """
    command_end = None
    for command in _BOX_COMMAND.finditer(text):
        command_end = command.end()
    if command_end is None:
        return None
    start = _SPACES.match(text, command_end).end()
    if start == len(text):
        return None
    if text[start] == "{":
        return _braced_argument(text, start)
    bare = _BARE_ARGUMENT.match(text, start)
    if bare is None or bare.group().startswith("}"):
        return None
    word = bare.group().rstrip(_TRAILING_PUNCTUATION)
    return word or None


def _braced_argument(text: str, open_index: int) -> str | None:
    """Content between the brace at `open_index` and its matching close, or None."""
    depth = 0
    for token in _BRACE_OR_ESCAPE.finditer(text, open_index):
        brace = token.group()
        if brace == "{":
            depth += 1
        elif brace == "}":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : token.start()]
    return None
