"""Verify one response in the current process: extract the last boxed answer, parse, compare.

This is the single place that decides a verdict; the worker processes of
:class:`~graft_env.rewards.pool.VerifierPool` call the same :func:`check_response`, so the
pooled and the in-process paths cannot disagree.

Time limits here are math-verify's own (``signal.alarm``, whole seconds, main thread only).
They end ordinary slow parses and comparisons cleanly, but they cannot interrupt a C-level
computation (e.g. a huge integer power); only the pool's parent-side kill can. Untrusted text
should therefore go through the pool, not through :func:`verify_one`.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from collections.abc import Callable

from math_verify import parse, verify
from math_verify.errors import TimeoutException
from sympy import Basic, MatrixBase

from graft_env.data.boxed import extract_last_boxed
from graft_env.rewards.verdict import Verdict

DEFAULT_MAX_CHARS = 32_000
"""Responses longer than this are checked only on their last ``max_chars`` characters.

Why: the final answer sits at the end, and bounding the scanned text keeps a 1 MB response
from stalling extraction. 32,000 characters comfortably hold a 4,096-token response
(GRAFT-SPEC §10/§11 cap responses at 4,096 tokens).
"""

_MATH_VERIFY_STEPS = 2
"""Slow steps that share one item's budget: parse the answer, compare. The gold's parse is
almost always a cache hit (RL verifies n responses per prompt against one gold)."""

_WARM_UP_PAIRS = (
    ("\\frac{1}{2}", "0.5"),
    ("(3, \\frac{\\pi}{2})", "(3,\\frac{\\pi}{2})"),
    ("x^{3/5}+\\sqrt{2}y", "\\sqrt{2}y+x^{0.6}"),
    ("[1, 2)", "\\{1,2\\}"),
    ("\\text{(C)}", "C"),
    ("10\\%", "x=0.1"),
)
"""Answers of the common kinds; verifying them once loads sympy's lazily imported parts."""


def validate_limits(timeout_s: float, max_chars: int) -> None:
    """Raise ValueError naming the bad limit; a zero/NaN limit would make every item fail."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
        raise TypeError(f"timeout_s must be a number of seconds, got {timeout_s!r}")
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ValueError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be an int >= 1, got {max_chars!r}")


def response_tail(response: str, max_chars: int) -> str:
    """The part of ``response`` that is checked: all of it, or its last ``max_chars`` chars."""
    return response if len(response) <= max_chars else response[-max_chars:]


def math_verify_timeout(timeout_s: float) -> int:
    """Per-step math-verify timeout in whole seconds (``signal.alarm`` granularity, >= 1).

    The item budget is split over the slow steps so an ordinary slow item usually ends with
    status ``timeout`` inside the worker, before the pool has to kill (and respawn) it.
    """
    return max(1, int(timeout_s // _MATH_VERIFY_STEPS))


def _as_boxed(latex: str) -> str:
    """Wrap an answer so math-verify's boxed-answer extraction picks up exactly this text.

    Golds arrive bare ("27", "\\frac{1}{2}", "(3, \\frac{\\pi}{2})"); math-verify only
    extracts LaTeX from delimited text, and wrapping gold and answer the same way makes both
    sides go through identical extraction and normalisation.
    """
    return "\\boxed{" + latex + "}"


@functools.lru_cache(maxsize=1024)
def _parse_boxed(latex: str, step_timeout: int) -> tuple[object, ...]:
    """math-verify's parse of a boxed answer, cached.

    RL verifies n responses per prompt against one gold, and many responses share an
    answer; parsing is the slowest step. The cache is bounded: 1,024 entries of at most
    ``max_chars`` characters each.
    """
    return tuple(parse(_as_boxed(latex), parsing_timeout=step_timeout, raise_on_error=True))


def judge(extracted: str, gold: str, timeout_s: float) -> Verdict:
    """Verdict for an already extracted answer against the gold answer.

    Statuses: an unparsable gold is ``error`` (a data problem, not the policy's), an
    unparsable answer ``parse_error``, a math-verify timeout ``timeout``. The comparison is
    tried for every (gold, answer) parse pair (symbolic and string forms); the first match
    gives reward 1. If none matches and some pair failed, the failure is reported rather than
    a plain wrong answer, because verification did not complete.
    """
    step_timeout = math_verify_timeout(timeout_s)
    try:
        gold_parsed = _parse_boxed(gold, step_timeout)
    except TimeoutException:
        return Verdict(0.0, "timeout", extracted)
    except Exception:
        return Verdict(0.0, "error", extracted)
    if not gold_parsed:
        return Verdict(0.0, "error", extracted)
    try:
        answer_parsed = _parse_boxed(extracted, step_timeout)
    except TimeoutException:
        return Verdict(0.0, "timeout", extracted)
    except Exception:
        return Verdict(0.0, "parse_error", extracted)
    if not answer_parsed:
        return Verdict(0.0, "parse_error", extracted)
    # With fallback_mode="first_match" math-verify also returns the raw text of a box it
    # could not turn into math; such an answer can still match a gold string exactly, but
    # if it does not, the honest status is parse_error, not a wrong answer.
    failure: str | None = None
    if not any(isinstance(form, (Basic, MatrixBase)) for form in answer_parsed):
        failure = "parse_error"
    # Cheap string forms first: an exact textual match needs no symbolic comparison.
    pairs = sorted(
        itertools.product(gold_parsed, answer_parsed),
        key=lambda pair: not (isinstance(pair[0], str) and isinstance(pair[1], str)),
    )
    for gold_form, answer_form in pairs:
        try:
            if verify(gold_form, answer_form, timeout_seconds=step_timeout, raise_on_error=True):
                return Verdict(1.0, "ok", extracted)
        except TimeoutException:
            failure = "timeout"
        except Exception:
            failure = failure or "error"
    return Verdict(0.0, failure or "ok", extracted)


@functools.cache
def warm_up() -> None:
    """Run a few verifications so the first real item is not charged for lazy imports.

    Cached: a process that inherited a warmed state (forked from the warmed fork server)
    skips it.
    """
    for gold, answer in _WARM_UP_PAIRS:
        judge(answer, gold, timeout_s=5.0)


def check_response(
    text: str,
    gold: str,
    timeout_s: float,
    on_extracted: Callable[[str], None] | None = None,
) -> Verdict:
    """Verdict for a (tail-limited) response: extract its last boxed answer, then :func:`judge`.

    ``on_extracted`` is called with the answer before the slow part starts; the pool's
    workers use it to report the answer early, so an item killed for time keeps it.
    """
    try:
        extracted = extract_last_boxed(text)
    except Exception:
        return Verdict(0.0, "error", None)
    if extracted is None:
        return Verdict(0.0, "no_answer", None)
    if on_extracted is not None:
        on_extracted(extracted)
    return judge(extracted, gold, timeout_s)


def verify_one(
    response: str, gold: str, *, timeout_s: float = 5.0, max_chars: int = DEFAULT_MAX_CHARS
) -> Verdict:
    """Verify one response in this process (the single-process baseline).

    Must run in the main thread: math-verify's timeouts use ``signal.alarm``. There is no
    hard time limit here (see the module docstring); use ``verify_batch`` or
    :class:`~graft_env.rewards.pool.VerifierPool` for untrusted text or from other threads.
    Responses longer than ``max_chars`` are checked only on their tail.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "verify_one must run in the main thread (math-verify times out with "
            "signal.alarm); call verify_batch or a VerifierPool from other threads"
        )
    if not isinstance(response, str) or not isinstance(gold, str):
        raise TypeError(
            f"verify_one needs str response and gold, got {type(response).__name__} "
            f"and {type(gold).__name__}"
        )
    validate_limits(timeout_s, max_chars)
    return check_response(response_tail(response, max_chars), gold, timeout_s)
