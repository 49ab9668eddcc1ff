"""In-process verification: extraction, gold wrapping, equivalences, statuses."""

import threading
import time

import pytest

from graft_env.rewards import Verdict, verify_one


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        ("so \\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{\\frac{1}{2}}", "0.5"),
        ("\\boxed{27}", "27.0"),
        ("\\boxed{70}", "70.0"),
        ("\\boxed{x^2 + 1}", "x^2+1"),
        ("\\boxed{\\left(3, \\frac{\\pi}{2}\\right)}", "(3, \\frac{\\pi}{2})"),
        ("first \\boxed{5}, then finally \\boxed{\\dfrac{3}{4}}", "0.75"),
        ("\\boxed{10\\%}", "10\\%"),
    ],
)
def test_equivalent_answers_are_correct(response: str, gold: str) -> None:
    verdict = verify_one(response, gold)
    assert verdict.reward == 1.0
    assert verdict.status == "ok"


@pytest.mark.parametrize(
    ("response", "gold"),
    [("\\boxed{26}", "27"), ("\\boxed{\\frac{1}{3}}", "0.5"), ("\\boxed{x^2-1}", "x^2+1")],
)
def test_wrong_answers_score_zero_with_status_ok(response: str, gold: str) -> None:
    assert verify_one(response, gold) == Verdict(0.0, "ok", response[7:-1])


def test_only_the_last_box_counts() -> None:
    assert verify_one("\\boxed{27} no wait \\boxed{28}", "27") == Verdict(0.0, "ok", "28")


@pytest.mark.parametrize("response", ["The answer is 27.", "\\boxed{27", ""])
def test_missing_or_unbalanced_box_is_no_answer(response: str) -> None:
    assert verify_one(response, "27") == Verdict(0.0, "no_answer", None)


@pytest.mark.parametrize("answer", ["", "\\frac{1}{}", "\\sqrt["])
def test_unparsable_answer_is_parse_error(answer: str) -> None:
    assert verify_one("\\boxed{" + answer + "}", "1") == Verdict(0.0, "parse_error", answer)


def test_unparsable_gold_is_error_not_a_wrong_answer() -> None:
    assert verify_one("\\boxed{1}", "") == Verdict(0.0, "error", "1")


def test_slow_item_ends_with_timeout_from_math_verify() -> None:
    start = time.monotonic()
    verdict = verify_one("\\boxed{9^{9^{9^{9^{9}}}}}", "1", timeout_s=2.0)
    assert verdict == Verdict(0.0, "timeout", "9^{9^{9^{9^{9}}}}")
    assert time.monotonic() - start < 60.0  # a hang guard (the alarm never fired), not a speed test


def test_long_response_is_checked_on_its_tail_only() -> None:
    padding = "x" * 1000
    assert verify_one(padding + "\\boxed{3}", "3", max_chars=100).reward == 1.0
    # The box lies outside the last 100 characters: documented tail-only behaviour.
    assert verify_one("\\boxed{3}" + padding, "3", max_chars=100).status == "no_answer"


def test_off_main_thread_raises_a_clear_error() -> None:
    errors: list[BaseException] = []

    def call() -> None:
        try:
            verify_one("\\boxed{1}", "1")
        except RuntimeError as error:
            errors.append(error)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert "main thread" in str(errors[0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"max_chars": 0}, "max_chars"),
    ],
)
def test_bad_limits_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        verify_one("\\boxed{1}", "1", **kwargs)


def test_non_string_inputs_are_rejected() -> None:
    with pytest.raises(TypeError, match="str response and gold"):
        verify_one("\\boxed{1}", 1)  # type: ignore[arg-type]
