"""The exchange probe (benchmarks/study/probe.py) on the tiny pair at tiny sizes: the real
loop's first steps, their funnel per direction, and its one-line errors before any model."""

from __future__ import annotations

import json
import math

import pytest

from algorithms.storage.yaml_schema import ConfigError
from benchmarks.study import probe

# the tiny pair on its home stream (level-1 addition and subtraction, all items), where it
# passes some samples: on the gap families it fails all, and every funnel field would be 0
TINY = ["env.batch_size=4", "algorithm_options.n=4", "sampling.max_new_tokens=64"]
TINY += ["env.dataset_options.families=null", "env.dataset_options.size=64"]


@pytest.fixture(scope="module")
def run() -> tuple[dict, list]:
    records = []
    return probe.probe(
        "tiny-pair", seed=0, steps=2, overrides=TINY, on_step=records.append
    ), records


@pytest.fixture(scope="module")
def result(run) -> dict:
    return run[0]


def test_the_funnel_is_what_the_step_did(run):
    # recomputed from the step's rollouts, transfers and batches (the probe reads the stats)
    result, records = run
    for step, record in zip(result["steps"], records, strict=True):
        for name, row in step["directions"].items():
            source, receiver = name.split("->")
            k = record.rollouts[receiver].rewards.sum(axis=1)
            assert row["receiver_all_fail"] == pytest.approx((k == 0).mean())
            assert row["receiver_all_pass"] == pytest.approx((k == 4).mean())
            groups = [g for g in record.transfers[receiver] if g.source == source]
            assert row["kept"] == len(groups)
            assert row["admitted"] == sum(int((g.weights > 0).sum()) for g in groups)
            useful = [s for s in record.batches[receiver].sequences if s.advantage and s.weight]
            assert row["informative"] == len(useful)
            if useful:
                assert row["peer_share"] == pytest.approx(
                    sum(s.is_peer for s in useful) / len(useful)
                )


def test_the_probe_reports_every_direction_of_every_step(result):
    assert [s["step"] for s in result["steps"]] == [0, 1]
    assert result["algorithm"] == "graft"
    for step in result["steps"]:
        assert set(step["directions"]) == {"tiny-b->tiny-a", "tiny-a->tiny-b"}
        assert step["seconds"] > 0 and "rollout" in step["timings"]
        for row in step["directions"].values():
            assert 0 <= row["receiver_all_fail"] + row["receiver_all_pass"] <= 1
            assert row["kept"] <= row["candidates"] <= row["gate_candidates"] <= 4
            assert row["transferred"] == 4 * row["kept"]  # whole groups of n = 4
            assert row["admitted"] <= row["transferred"]
            assert math.isnan(row["floor_pass"]) == (row["transferred"] == 0)
            assert row["informative"] <= 4 * 4 + row["admitted"]
            for share in ("peer_share", "peer_weight_share"):
                assert math.isnan(row[share]) or 0 <= row[share] <= 1
            assert math.isnan(row["mean_s"]) == (row["transferred"] == 0)
    text = probe.format_probe(result)
    assert "tiny-b->tiny-a" in text and "step seconds" in text
    json.dumps(result)  # JSON-ready


def test_balancing_keeps_at_least_the_smaller_side_both_ways(result):
    # m = min(|C_ab|, |C_ba|) both ways; ties at the m-th highest k_S are kept too
    for step in result["steps"]:
        rows = list(step["directions"].values())
        m = min(row["candidates"] for row in rows)
        assert all(m <= row["kept"] <= row["candidates"] for row in rows)


def test_the_summary_is_the_mean_over_steps(result):
    for name, row in result["mean"].items():
        values = [s["directions"][name]["gate_candidates"] for s in result["steps"]]
        assert row["gate_candidates"] == pytest.approx(sum(values) / len(values))


def test_bad_input_fails_before_any_model_loads():
    with pytest.raises(ValueError, match="--pair 'tiny': unknown pair"):
        probe.probe("tiny", steps=1)
    with pytest.raises(ValueError, match="--steps must be >= 1"):
        probe.probe("tiny-pair", steps=0)
    with pytest.raises(ConfigError, match="batch_size"):
        probe.probe("gap-weak", steps=1, overrides=["env.batch_size=0"])  # not built: not built


def test_the_thresholds_are_judged_per_direction_on_the_reverse_all_pass():
    """T1 >= 3 candidates, T2 >= 50 % floor pass (n/a with nothing transferred), T3: the
    peer's all-pass share, which is the reverse direction's receiver_all_pass, <= 50 %."""

    def row(candidates: float, floor: float, all_pass: float) -> dict[str, float]:
        return {"gate_candidates": candidates, "floor_pass": floor, "receiver_all_pass": all_pass}

    mean = {"a->b": row(3.0, 0.5, 0.6), "b->a": row(2.9, math.nan, 0.1)}
    judged = probe.thresholds(mean)
    # a->b: receiver b; its peer a's all-pass share is b->a's receiver_all_pass (0.1)
    assert judged["a->b"] == {"T1": True, "T2": True, "T3": True}
    assert judged["b->a"] == {"T1": False, "T2": None, "T3": False}


def test_the_probe_result_judges_its_own_means(result):
    assert result["thresholds"] == probe.thresholds(result["mean"])
    assert "thresholds " in probe.format_probe(result)
