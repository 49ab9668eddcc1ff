"""The TensorBoard mirror: one writer per agent under tb/<agent>/ with the metrics' own tag
names (so agents overlay), histograms of the received s and w, and sample completions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_configs import small_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from algorithms.testing import make_rollouts
from algorithms.training.loop import Trainer
from algorithms.training.tensorboard_sink import (
    TensorBoardSink,
    samples_table,
    tags,
)


def events(directory: Path) -> EventAccumulator:
    loaded = EventAccumulator(str(directory), size_guidance={"tensors": 0, "histograms": 0})
    loaded.Reload()
    return loaded


def test_each_agent_has_its_writer_under_the_same_tags(tmp_path):
    sink = TensorBoardSink(tmp_path, samples_every=2)
    for step in range(3):
        for agent in ("a", "b"):
            sink.scalars(step, agent, {"reward_mean": 0.1 * step, "flag": True, "note": "x"})
            received = ([0.5, -0.2], [1.0, 0.3]) if agent == "b" else ([], [])
            sink.step(step, agent, *received, make_rollouts(agent, [1, 0, 2]))
    sink.close()
    a, b = events(tmp_path / "tb" / "a"), events(tmp_path / "tb" / "b")
    assert a.Tags()["scalars"] == b.Tags()["scalars"] == ["reward_mean"]  # numbers only
    assert [e.value for e in b.Scalars("reward_mean")] == pytest.approx([0.0, 0.1, 0.2])
    # only b received trajectories: only b has the histograms of s and w
    assert sorted(b.Tags()["histograms"]) == ["exchange/s", "exchange/w"]
    assert a.Tags()["histograms"] == []
    assert [e.histogram_value.num for e in b.Histograms("exchange/s")] == [2, 2, 2]
    # the completions table every 2 steps: steps 0 and 2
    assert [e.step for e in a.Tensors("samples/text_summary")] == [0, 2]


def test_samples_table_keeps_each_completion_on_one_row():
    rollouts = make_rollouts("a", [1, 0])
    rollouts.texts[0][0] = "x | y\nz"
    table = samples_table(rollouts).splitlines()
    assert table[0] == "| prompt | response | reward |" and len(table) == 4
    assert table[2].startswith("| prompt 0 | x \\| y<br>z | ")


def test_a_run_logs_both_agents_under_tb(tmp_path, fresh_policies):
    config = small_config(tmp_path / "run", "graft", steps=1, tensorboard=True)
    Trainer(config, policies=fresh_policies("tiny-a", "tiny-b")).train()
    a, b = (events(tmp_path / "run" / "tb" / agent) for agent in ("tiny-a", "tiny-b"))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    for agent, found in (("tiny-a", a), ("tiny-b", b)):
        # each agent's tags are its metrics row's keys, its received direction without the
        # agents' names (which keys a row has depends on what moved: not pinned here)
        [row] = [r for r in rows if r["agent"] == agent]
        numbers = {
            k: v for k, v in row.items() if isinstance(v, int | float) and not isinstance(v, bool)
        }
        scalars = set(found.Tags()["scalars"])
        assert scalars == set(tags(numbers, agent)) - {"step"}
        assert not any("tiny-" in tag for tag in scalars)
        # the tags every row has, so the agents overlay on them
        assert {"reward_mean", "loss", "exchange/received/candidates"} <= scalars
    assert [e.step for e in a.Tensors("samples/text_summary")] == [0]


def test_received_directions_drop_the_source_only_when_there_is_one():
    row = {"exchange/b->a/admitted": 2.0, "exchange/a->b/admitted": 1.0, "reward_mean": 0.5}
    assert tags(row, "a") == {
        "exchange/received/admitted": 2.0,
        "exchange/a->b/admitted": 1.0,  # a direction `a` sends in keeps its name
        "reward_mean": 0.5,
    }
    two = {"exchange/b->a/admitted": 2.0, "exchange/c->a/admitted": 3.0}
    assert tags(two, "a") == {
        "exchange/received/b/admitted": 2.0,
        "exchange/received/c/admitted": 3.0,
    }


def test_a_resumed_run_replaces_the_steps_it_logs_again(tmp_path):
    first = TensorBoardSink(tmp_path)
    for step in range(3):  # killed after step 2; its checkpoint is at step 1
        first.scalars(step, "a", {"reward_mean": 0.0})
    first.close()
    resumed = TensorBoardSink(tmp_path)
    for step in (1, 2):
        resumed.scalars(step, "a", {"reward_mean": 1.0})
    resumed.close()
    values = [(e.step, e.value) for e in events(tmp_path / "tb" / "a").Scalars("reward_mean")]
    assert values == [(0, 0.0), (1, 1.0), (2, 1.0)]
