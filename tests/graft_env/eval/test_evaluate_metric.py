"""The avg@k arithmetic of `evaluate`, checked with a scripted policy against hand computations."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graft_env.data import load
from graft_env.eval.evaluate import PAPER_BENCHMARKS, batch_seed, evaluate

ANSWERS = ["42", "\\frac{1}{2}", "x^2 + 1"]


def even_oracle(problem: int, call: int, sample: int) -> str:
    return "right" if sample % 2 == 0 else "wrong"


def test_even_index_oracle_scores_exactly_one_half(scripted, handmade, data_dir, verifier):
    math500 = load("math500", data_dir=data_dir)[:3]
    mine = handmade("handmade", ANSWERS)
    policy = scripted([*math500, *mine], even_oracle)
    result = evaluate(
        policy, {"math500": math500, "handmade": mine}, k=4, repeats=2, verifier=verifier
    )
    summary = result.summary()
    for name in ("math500", "handmade"):
        assert summary[f"{name}/pass@1"] == 0.5
        assert summary[f"{name}/pass@1_std"] == 0.0
        assert summary[f"{name}/pass@k"] == 1.0
        assert summary[f"{name}/all_fail"] == 0.0
        assert result.benchmarks[name].successes == [[2, 2, 2], [2, 2, 2]]
        assert result.benchmarks[name].status_counts["ok"] == 3 * 4 * 2
    assert summary["average/pass@1"] == 0.5
    assert len(result.samples) == 2 * 3 * 4 * 2
    assert all(s.reward == float(s.sample_index % 2 == 0) for s in result.samples)


def test_avg_at_k_mean_and_std_match_hand_computation(scripted, handmade, verifier):
    # correct samples out of k = 4 per (benchmark, repeat, problem); the rest wrong or empty
    counts = {
        "alpha": [[4, 1, 0], [2, 1, 1]],
        "beta": [[1, 2], [4, 4]],
    }
    sets = {"alpha": handmade("alpha", ANSWERS), "beta": handmade("beta", ANSWERS[:2])}
    problems = [*sets["alpha"], *sets["beta"]]
    offsets = {"alpha": 0, "beta": 3}

    def script(problem: int, call: int, sample: int) -> str:
        name = "alpha" if problem < 3 else "beta"
        if sample < counts[name][call][problem - offsets[name]]:
            return "right"
        return "none" if sample == 3 else "wrong"

    result = evaluate(scripted(problems, script), sets, k=4, repeats=2, verifier=verifier)
    alpha = [(4 + 1 + 0) / 12, (2 + 1 + 1) / 12]
    beta = [(1 + 2) / 8, (4 + 4) / 8]
    average = [(alpha[0] + beta[0]) / 2, (alpha[1] + beta[1]) / 2]
    summary = result.summary()
    assert result.benchmarks["alpha"].pass_at_1_per_repeat == pytest.approx(alpha)
    assert summary["alpha/pass@1"] == pytest.approx(0.375)
    assert summary["alpha/pass@1_std"] == pytest.approx(abs(alpha[0] - alpha[1]) / 2)
    assert summary["beta/pass@1"] == pytest.approx(0.6875)
    assert result.average_per_repeat == pytest.approx(average)
    assert summary["average/pass@1"] == pytest.approx(sum(average) / 2)
    assert summary["average/pass@1_std"] == pytest.approx(abs(average[0] - average[1]) / 2)
    assert summary["alpha/all_fail"] == pytest.approx(1 / 6)  # one problem, one repeat
    assert summary["alpha/pass@k"] == pytest.approx(5 / 6)
    assert result.benchmarks["alpha"].successes == counts["alpha"]
    # sample 3 is empty whenever it is not correct: alpha has 5 such, beta 2
    assert result.benchmarks["alpha"].status_counts["no_answer"] == 5
    assert result.benchmarks["beta"].status_counts["no_answer"] == 2
    assert result.benchmarks["beta"].status_counts["ok"] == 2 * 2 * 4 - 2


@settings(max_examples=15, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda k: st.tuples(
            st.just(k),
            st.lists(st.lists(st.integers(0, k), min_size=3, max_size=3), min_size=1, max_size=2),
        )
    )
)
def test_pass_at_1_is_mean_of_success_rates(scripted, handmade, verifier, case):
    k, counts = case
    problems = handmade("prop", ANSWERS)
    policy = scripted(problems, lambda p, call, s: "right" if s < counts[call][p] else "wrong")
    result = evaluate(policy, {"prop": problems}, k=k, repeats=len(counts), verifier=verifier)
    rates = np.asarray(counts) / k
    assert result.benchmarks["prop"].successes == counts
    assert result.summary()["prop/pass@1"] == pytest.approx(rates.mean(axis=1).mean())
    assert result.summary()["prop/pass@1_std"] == pytest.approx(rates.mean(axis=1).std())
    assert result.summary()["prop/all_fail"] == pytest.approx((rates == 0).mean())


def test_limit_keeps_the_first_problems_and_batches_cover_them(scripted, handmade, verifier):
    problems = handmade("many", [str(i) for i in range(7)])
    policy = scripted(problems, even_oracle)
    result = evaluate(
        policy, {"many": problems}, k=2, limit=5, batch_size=2, repeats=2, verifier=verifier
    )
    assert result.benchmarks["many"].problem_ids == [p.id for p in problems[:5]]
    assert {s.problem_id for s in result.samples} == {p.id for p in problems[:5]}
    assert len(policy.seeds) == 2 * 3  # ceil(5 / 2) batches per repeat
    assert len(set(policy.seeds)) == 6
    again = scripted(problems, even_oracle)
    evaluate(again, {"many": problems}, k=2, limit=5, batch_size=2, repeats=2, verifier=verifier)
    assert again.seeds == policy.seeds
    assert policy.seeds[0] == batch_seed(0, "many", 0)
    assert policy.seeds[3] == batch_seed(1, "many", 0)  # repeat 1 uses seed + 1


def test_each_batch_is_verified_while_the_next_one_generates(scripted, handmade, verifier):
    """Verification runs in the pool's worker processes: evaluate hands a batch's responses
    to it and samples the next batch (of the same or the next benchmark) meanwhile, and the
    result is the sequential one."""
    sets = {"alpha": handmade("alpha", ANSWERS), "beta": handmade("beta", ANSWERS[:2])}
    problems = [*sets["alpha"], *sets["beta"]]
    started = [threading.Event() for _ in range(6)]  # one per generate call, and a spare

    class Recording(scripted):
        def generate(self, prompts, n, sampling):
            started[len(self.seeds)].set()
            return super().generate(prompts, n, sampling)

    class Probe:
        """The real pool; notes whether the next generate call began during each batch."""

        def __init__(self) -> None:
            self.overlapped: list[bool] = []

        def verify_batch(self, responses, golds):
            following = started[len(self.overlapped) + 1]
            self.overlapped.append(following.wait(timeout=2.0))
            return verifier.verify_batch(responses, golds)

    probe = Probe()
    result = evaluate(Recording(problems, even_oracle), sets, k=2, batch_size=1, verifier=probe)
    assert probe.overlapped == [True, True, True, True, False]  # the last has no successor
    sequential = evaluate(
        scripted(problems, even_oracle), sets, k=2, batch_size=1, verifier=verifier
    )
    assert result.samples == sequential.samples
    assert result.benchmarks["beta"].successes == [[1, 1]]


def test_samples_keep_every_field(scripted, handmade, verifier):
    problems = handmade("fields", ANSWERS[:2])
    result = evaluate(scripted(problems, even_oracle), {"fields": problems}, k=2, verifier=verifier)
    first, second = result.samples[:2]
    assert (first.benchmark, first.problem_id, first.repeat, first.sample_index) == (
        "fields",
        "fields/0",
        0,
        0,
    )
    assert first.gold == "42" and first.extracted == "42" and first.reward == 1.0
    assert first.status == "ok" and first.finish_reason == "stop"
    assert first.num_tokens == len(first.text)
    assert second.extracted == "-987654321" and second.reward == 0.0


def test_bad_inputs_raise_clear_errors(scripted, handmade, verifier):
    problems = handmade("bad", ANSWERS)
    policy = scripted(problems, even_oracle)
    with pytest.raises(TypeError, match="pass \\['math500'\\]"):
        evaluate(policy, "math500", verifier=verifier)
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        evaluate(policy, {"bad": problems}, k=0, verifier=verifier)
    with pytest.raises(ValueError, match="limit must be None or an int >= 1"):
        evaluate(policy, {"bad": problems}, limit=0, verifier=verifier)
    with pytest.raises(ValueError, match="top_p"):
        evaluate(policy, {"bad": problems}, top_p=0.0, verifier=verifier)
    with pytest.raises(ValueError, match="has no problems"):
        evaluate(policy, {"bad": []}, verifier=verifier)
    with pytest.raises(ValueError, match="problem id 'bad/0' twice"):
        evaluate(policy, {"bad": [problems[0], problems[0]]}, verifier=verifier)
    with pytest.raises(ValueError, match="named more than once"):
        evaluate(policy, ["aime24", "aime24"], verifier=verifier)


def test_a_policy_returning_short_groups_is_rejected(scripted, handmade, verifier):
    problems = handmade("short", ANSWERS)

    class DroppingPolicy(scripted):
        def generate(self, prompts, n, sampling):
            return [group[:-1] for group in super().generate(prompts, n, sampling)]

    with pytest.raises(ValueError, match="group 0 is not 4 Generation objects"):
        evaluate(DroppingPolicy(problems, even_oracle), {"short": problems}, k=4, verifier=verifier)


def test_paper_benchmarks_are_registered_datasets(data_dir):
    for name in PAPER_BENCHMARKS:
        assert load(name, data_dir=data_dir), name
