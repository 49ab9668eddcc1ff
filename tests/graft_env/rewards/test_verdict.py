"""Verdict invariants and status counting."""

import pytest

from graft_env.rewards import STATUSES, Verdict, status_counts


def test_statuses_are_the_contract() -> None:
    assert STATUSES == ("ok", "no_answer", "parse_error", "timeout", "error")


@pytest.mark.parametrize("reward", [0.5, 2.0, -1.0, 1, True, float("nan")])
def test_verdict_rejects_rewards_other_than_float_zero_or_one(reward: object) -> None:
    with pytest.raises(ValueError, match="reward"):
        Verdict(reward, "ok", None)  # type: ignore[arg-type]


def test_verdict_rejects_unknown_status() -> None:
    with pytest.raises(ValueError, match="status"):
        Verdict(0.0, "wrong", None)


@pytest.mark.parametrize("status", [s for s in STATUSES if s != "ok"])
def test_reward_one_requires_completed_verification(status: str) -> None:
    with pytest.raises(ValueError, match="requires status 'ok'"):
        Verdict(1.0, status, "1")


def test_status_counts_has_every_status_and_counts_each() -> None:
    verdicts = [
        Verdict(1.0, "ok", "1"),
        Verdict(0.0, "ok", "2"),
        Verdict(0.0, "timeout", "9^9"),
        Verdict(0.0, "no_answer", None),
    ]
    counts = status_counts(verdicts)
    assert list(counts) == list(STATUSES)
    assert counts == {"ok": 2, "no_answer": 1, "parse_error": 0, "timeout": 1, "error": 0}


def test_status_counts_of_nothing_is_all_zero() -> None:
    assert status_counts(iter([])) == dict.fromkeys(STATUSES, 0)
