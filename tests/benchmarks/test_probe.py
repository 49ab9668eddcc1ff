"""The exchange probe (benchmarks/study/probe.py) on the tiny pair at tiny sizes: the real
loop's first steps, their funnel per direction, and its one-line errors before any model."""

from __future__ import annotations

import json
import math

import pytest

from algorithms.storage.yaml_schema import ConfigError
from benchmarks.study import probe

TINY = ["env.batch_size=4", "algorithm_options.n=4", "sampling.max_new_tokens=24"]


@pytest.fixture(scope="module")
def result() -> dict:
    return probe.probe("tiny-pair", seed=0, steps=2, overrides=TINY)


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
    text = probe.format_probe(result)
    assert "tiny-b->tiny-a" in text and "step seconds" in text
    json.dumps(result)  # JSON-ready


def test_balancing_keeps_the_same_number_both_ways(result):
    for step in result["steps"]:
        kept = [row["kept"] for row in step["directions"].values()]
        assert kept[0] == kept[1]


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
