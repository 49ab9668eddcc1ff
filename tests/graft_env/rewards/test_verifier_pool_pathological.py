"""Pathological responses end within the hard limit and leave the pool working."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from graft_env.rewards import VerifierPool

TIMEOUT_S = 2.0
HANG_GUARD_S = 60.0  # catches a pool that never kills a job; no slow machine comes near it
NUM_WORKERS = 2

NESTED = "{" * 10_000 + "1" + "}" * 10_000
PATHOLOGICAL = {
    "1 MB without a box": "x" * 1_000_000,
    "1 MB of open braces": "\\boxed{" + "{" * 1_000_000,
    "10,000 nested braces": "\\boxed{" + NESTED + "}",
    "2,000 nested fractions": "\\boxed{" + "\\frac{1}{" * 2_000 + "2" + "}" * 2_000 + "}",
    "tower of powers": "\\boxed{9^{9^{9^{9^{9}}}}}",
    "huge factorial": "\\boxed{(10^{10^{8}})!}",
    "huge exponent product": "\\boxed{2^{10^{20}} \\cdot 3^{10^{20}}}",
    "malformed latex": "\\boxed{\\frac{\\sqrt[}{\\left(}}\\right]^_}",
    "unbalanced box": "\\boxed{\\frac{1}{2}",
    "long answer": "\\boxed{" + "+".join(["x"] * 10_000) + "}",
}


@pytest.fixture(scope="module")
def pool() -> Iterator[VerifierPool]:
    with VerifierPool(num_workers=NUM_WORKERS, timeout_s=TIMEOUT_S) as shared:
        yield shared


def test_pathological_batch_ends_within_the_limit_then_pool_still_works(
    pool: VerifierPool,
) -> None:
    names = list(PATHOLOGICAL)
    start = time.monotonic()
    verdicts = pool.verify_batch([PATHOLOGICAL[name] for name in names], ["1"] * len(names))
    elapsed = time.monotonic() - start
    rounds = -(-len(names) // NUM_WORKERS)
    assert elapsed <= rounds * TIMEOUT_S + HANG_GUARD_S, f"batch took {elapsed:.1f} s"
    by_name = dict(zip(names, verdicts, strict=True))
    assert all(verdict.reward == 0.0 for verdict in verdicts)
    assert by_name["1 MB without a box"].status == "no_answer"
    assert by_name["unbalanced box"].status == "no_answer"
    for name in ("10,000 nested braces", "tower of powers", "huge exponent product"):
        assert by_name[name].status in {"timeout", "error"}, name
    assert by_name["malformed latex"].status == "parse_error"

    normal = pool.verify_batch(
        ["\\boxed{0.5}", "\\boxed{27}", "\\boxed{26}"], ["\\frac{1}{2}", "27.0", "27"]
    )
    assert [(v.reward, v.status) for v in normal] == [(1.0, "ok"), (1.0, "ok"), (0.0, "ok")]


def test_every_pathological_item_alone_ends_within_the_limit(pool: VerifierPool) -> None:
    for name, response in PATHOLOGICAL.items():
        start = time.monotonic()
        (verdict,) = pool.verify_batch([response], ["1"])
        elapsed = time.monotonic() - start
        assert elapsed <= TIMEOUT_S + HANG_GUARD_S, f"{name} took {elapsed:.1f} s"
        assert verdict.reward == 0.0, name


def test_pathological_items_fit_the_checked_tail(pool: VerifierPool) -> None:
    # Otherwise the max_chars guard would hide them and they would test nothing.
    for name, response in PATHOLOGICAL.items():
        if name.startswith("1 MB"):
            continue
        assert len(response) <= pool.max_chars, name


def test_megabyte_response_is_checked_on_its_tail(pool: VerifierPool) -> None:
    (verdict,) = pool.verify_batch(["y" * 1_000_000 + " so \\boxed{42}"], ["42"])
    assert (verdict.reward, verdict.status, verdict.extracted) == (1.0, "ok", "42")
