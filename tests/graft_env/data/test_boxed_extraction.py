"""`extract_last_boxed`: examples, properties, and linear time on long input."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graft_env.data import extract_last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so the answer is $\boxed{27}$.", "27"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"first \boxed{1}, then \boxed{2}, finally \boxed{3}", "3"),
        (r"\fbox{x+1}", "x+1"),
        (r"\boxed{1} and \fbox{2}", "2"),
        (r"\boxed 5", "5"),
        (r"\boxed 5.", "5"),
        (r"$\boxed 2$.", "2"),
        (r"\boxed {17}.", "17"),
        (r"\boxed \frac12 here", r"\frac12"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"\boxed{a\}b}", r"a\}b"),
        (r"\boxed{}", ""),
        (r"\boxed{\boxed{4}}", "4"),
        ("no box here", None),
        ("", None),
        (r"\boxed{1", None),
        (r"\boxed{1} then \boxed{2", None),
        (r"\boxed{{2}", None),
        (r"the end \boxed", None),
        (r"\boxed $", None),
        (r"\boxed}", None),
        (r"\boxedx{3}", None),
        (r"\boxed{3} \boxedx{4}", "3"),
    ],
)
def test_examples(text: str, expected: str | None) -> None:
    assert extract_last_boxed(text) == expected


# Text with balanced braces and no backslashes, so it can neither open a box nor
# close one early.
_PLAIN = st.text(alphabet=st.characters(blacklist_characters="\\{}"), max_size=20)
_BALANCED = st.recursive(_PLAIN, lambda inner: st.builds("{{{}}}".format, inner), max_leaves=8)
_CONTENT = st.lists(_BALANCED, max_size=4).map("".join)


@settings(max_examples=200, deadline=None)
@given(prefix=_PLAIN, contents=st.lists(_CONTENT, min_size=1, max_size=4), suffix=_PLAIN)
def test_last_balanced_box_wins(prefix: str, contents: list[str], suffix: str) -> None:
    boxes = " ".join(rf"\boxed{{{content}}}" for content in contents)
    assert extract_last_boxed(prefix + boxes + suffix) == contents[-1]


@settings(max_examples=100, deadline=None)
@given(content=_CONTENT, tail=_PLAIN)
def test_unclosed_last_box_is_none(content: str, tail: str) -> None:
    text = rf"\boxed{{7}} \fbox{{{content}{{{tail}}}"
    assert extract_last_boxed(text) is None


@settings(max_examples=100, deadline=None)
@given(text=_PLAIN)
def test_text_without_box_is_none(text: str) -> None:
    assert extract_last_boxed(text) is None


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("\\boxedfbx{} $5.\n")) | st.characters()))
def test_arbitrary_text_never_raises(text: str) -> None:
    result = extract_last_boxed(text)
    assert result is None or isinstance(result, str)


@pytest.mark.parametrize(
    "text",
    [
        "x" * 1_000_000 + r"\boxed{" + "{a}" * 100_000 + "}",
        r"\boxed{" * 150_000,
        "{" * 1_000_000 + r"\boxed{" + "{" * 1_000_000,
        r"\boxed{1}" * 110_000,
        r"\boxed" + " " * 1_000_000 + "7",
    ],
    ids=["long-prefix", "many-open-boxes", "open-braces", "many-boxes", "long-spaces"],
)
def test_linear_time_on_megabyte_input(text: str) -> None:
    # A hang guard, not a speed test: a quadratic scan of 1 MB (~1e12 steps) runs for hours,
    # the linear one for milliseconds, so no machine's load comes near the bound.
    start = time.perf_counter()
    extract_last_boxed(text)
    assert time.perf_counter() - start < 60.0
