"""Every real gold answer, boxed in a response, verifies as correct against itself.

This checks the gold wrapping and parsing on the data the project trains and evaluates on:
a gold that cannot verify against itself would make its prompt unsolvable.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from graft_env.data import Problem, load
from graft_env.rewards import VerifierPool

BENCHMARKS = ("math500", "aime24", "aime25", "amc23", "minerva")
MATH_TRAIN_SAMPLE = 300
SAMPLE_SEED = 0

# Golds that math-verify genuinely cannot verify against themselves: id -> reason.
KNOWN_UNVERIFIABLE: dict[str, str] = {}


@pytest.fixture(scope="module")
def pool() -> Iterator[VerifierPool]:
    with VerifierPool(num_workers=2, timeout_s=10.0) as shared:
        yield shared


def _self_verification_failures(pool: VerifierPool, problems: list[Problem]) -> list[str]:
    golds = [problem.answer for problem in problems]
    responses = ["... so the answer is \\boxed{" + gold + "}" for gold in golds]
    verdicts = pool.verify_batch(responses, golds)
    return [
        f"{problem.id}: {verdict.status} for gold {problem.answer!r}"
        for problem, verdict in zip(problems, verdicts, strict=True)
        if verdict.reward != 1.0 and problem.id not in KNOWN_UNVERIFIABLE
    ]


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_golds_verify_against_themselves(
    pool: VerifierPool, name: str, data_dir: Path
) -> None:
    problems = load(name, data_dir=data_dir)
    assert problems, f"{name} loaded no problems"
    assert _self_verification_failures(pool, problems) == []


def test_math_train_sample_golds_verify_against_themselves(
    pool: VerifierPool, data_dir: Path
) -> None:
    problems = load("math_train", data_dir=data_dir)
    sample = random.Random(SAMPLE_SEED).sample(problems, MATH_TRAIN_SAMPLE)
    assert _self_verification_failures(pool, sample) == []
