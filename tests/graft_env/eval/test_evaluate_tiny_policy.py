"""`evaluate` through the real transformers backend: a tiny random-init model, real data."""

from __future__ import annotations

import pytest

from graft_env.data import load
from graft_env.eval.evaluate import evaluate
from graft_env.rewards import STATUSES

K, REPEATS, MAX_NEW_TOKENS = 2, 2, 12


@pytest.fixture(scope="module")
def tiny_result(tiny_policy, handmade, data_dir, verifier):
    sets = {
        "math500": load("math500", data_dir=data_dir)[:5],
        "handmade": handmade("handmade", ["7", "\\frac{3}{4}"]),
    }
    return evaluate(
        tiny_policy,
        sets,
        k=K,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=MAX_NEW_TOKENS,
        repeats=REPEATS,
        limit=3,
        batch_size=2,
        verifier=verifier,
    )


def test_counts_and_shapes(tiny_result, data_dir):
    math500 = tiny_result.benchmarks["math500"]
    assert math500.problem_ids == [p.id for p in load("math500", data_dir=data_dir)[:3]]
    assert len(tiny_result.benchmarks["handmade"].problem_ids) == 2  # limit above its size
    for name, problems in (("math500", 3), ("handmade", 2)):
        bench = tiny_result.benchmarks[name]
        assert len(bench.successes) == REPEATS
        assert all(
            len(row) == problems and all(0 <= c <= K for c in row) for row in bench.successes
        )
        assert sum(bench.status_counts.values()) == REPEATS * problems * K
        assert sum(bench.finish_reasons.values()) == REPEATS * problems * K
        assert 0 < bench.generated_tokens <= REPEATS * problems * K * MAX_NEW_TOKENS
        assert bench.generation_seconds > 0 and bench.verification_seconds > 0
    assert len(tiny_result.samples) == REPEATS * (3 + 2) * K


def test_pass_at_1_is_a_rate_with_a_std_over_repeats(tiny_result):
    summary = tiny_result.summary()
    for name in ("math500", "handmade", "average"):
        assert 0.0 <= summary[f"{name}/pass@1"] <= 1.0
        assert summary[f"{name}/pass@1_std"] >= 0.0
    assert len(tiny_result.average_per_repeat) == REPEATS


def test_samples_record_the_real_generations(tiny_result):
    repeats_seen = {s.repeat for s in tiny_result.samples}
    assert repeats_seen == set(range(REPEATS))
    for sample in tiny_result.samples:
        assert sample.status in STATUSES
        assert sample.finish_reason in ("stop", "length")
        assert sample.reward in (0.0, 1.0)
        assert 1 <= sample.num_tokens <= MAX_NEW_TOKENS
        assert sample.finish_reason == "stop" or sample.num_tokens == MAX_NEW_TOKENS
    # different seeds per repeat: the two repeats do not sample identical texts
    first = [s.text for s in tiny_result.samples if s.repeat == 0]
    second = [s.text for s in tiny_result.samples if s.repeat == 1]
    assert first != second


def test_same_seed_same_samples(tiny_policy, handmade, verifier, tiny_result):
    problems = handmade("handmade", ["7", "\\frac{3}{4}"])
    options = dict(k=K, temperature=1.0, top_p=1.0, max_new_tokens=MAX_NEW_TOKENS)
    again = evaluate(
        tiny_policy,
        {"handmade": problems},
        repeats=REPEATS,
        batch_size=2,
        verifier=verifier,
        **options,
    )
    expected = [s.text for s in tiny_result.samples if s.benchmark == "handmade"]
    assert [s.text for s in again.samples] == expected
