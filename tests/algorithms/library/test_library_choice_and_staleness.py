"""Which stored group a prompt gets, and the staleness metrics (pure functions)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import algorithms
from algorithms.library.format import LIBRARY_AGENT, LibraryGroup, prompt_key, write_library
from algorithms.library.source import LibrarySource, choose_group
from algorithms.library.staleness import (
    HOUR_EDGES,
    admitted_by_age,
    bucket_labels,
    staleness_metrics,
)
from graft_env.types import AgentRollouts


def stored(group_id: str, generated_at: float, step: int | None = 0) -> LibraryGroup:
    return LibraryGroup(
        group_id=group_id, key="k", problem="p", dataset=None, prompt_id=None, source="s",
        agent=None, model_id="m", tokenizer_id="m", step=step, generated_at=generated_at,
        texts=["a", "b"], token_ids=[None, None], logprobs=[None, None],
        logprob_origins=["missing"] * 2, finish_reasons=["stop"] * 2,
        rewards=np.zeros(2), statuses=["ok"] * 2,
    )  # fmt: skip


def test_most_recent_is_the_latest_written_and_highest_k_the_most_successes():
    groups = [stored("a", 5.0), stored("b", 9.0), stored("c", 7.0)]
    ks = [3, 1, 3]
    assert choose_group(groups, ks, "most_recent") == 1
    assert choose_group(groups, ks, "model") == 1  # the named model's groups, latest
    assert choose_group(groups, ks, "highest_k") == 2  # k 3 twice: the later of the two
    with pytest.raises(ValueError, match="unknown choice 'newest'"):
        choose_group(groups, ks, "newest")


def test_ties_in_time_go_to_the_later_source_step_then_the_group_id():
    assert choose_group([stored("a", 5.0, 3), stored("b", 5.0, None)], [1, 1], "most_recent") == 0
    assert choose_group([stored("b", 5.0, 3), stored("a", 5.0, 3)], [1, 1], "most_recent") == 0


def test_bucket_labels_name_each_interval():
    assert bucket_labels((1, 10, 100)) == ["lt1", "1to10", "10to100", "ge100"]
    assert bucket_labels(HOUR_EDGES) == ["lt1", "1to24", "24to168", "ge168"]


@given(
    st.lists(
        st.tuples(
            st.floats(-50, 500, allow_nan=False),
            st.lists(st.sampled_from([0.0, 0.3, 1.0]), min_size=1, max_size=4),
        ),
        max_size=8,
    )
)
def test_buckets_partition_the_groups_and_count_admitted_responses(groups):
    edges = (1, 10, 100)
    ages = [age for age, _ in groups]
    weights = [np.array(w) for _, w in groups]
    out = admitted_by_age("x", ages, weights, edges)
    labels = bucket_labels(edges)
    bounds = [-np.inf, *edges, np.inf]
    total = 0.0
    for index, label in enumerate(labels):
        inside = [
            w
            for age, w in zip(ages, weights, strict=True)
            if bounds[index] <= age < bounds[index + 1]
        ]
        if not inside:
            assert f"x_{label}/transferred" not in out
            continue
        transferred = sum(w.size for w in inside)
        admitted = sum(int((w > 0).sum()) for w in inside)
        assert out[f"x_{label}/transferred"] == transferred
        assert out[f"x_{label}/admitted"] == admitted
        assert out[f"x_{label}/admitted_share"] == pytest.approx(admitted / transferred)
        total += transferred
    assert total == sum(w.size for w in weights)


def test_staleness_metrics_give_ages_in_steps_and_hours():
    now = 100_000.0
    out = staleness_metrics(
        now=now,
        step_ages=[10, None, 1],
        generated_at=[now - 2 * 3600, now - 30 * 3600, now - 60],
        weights=[np.array([1.0, 0.0]), np.array([0.5, 0.5]), np.array([0.0, 0.0])],
    )
    assert out["library/age_steps/count"] == 2  # the imported group has no step
    assert out["library/age_steps/min"] == 1 and out["library/age_steps/max"] == 10
    assert out["library/age_hours/count"] == 3
    assert out["library/age_hours/max"] == pytest.approx(30)
    assert out["library/age_steps_1to10/admitted_share"] == 0.0  # age 1: the step-11 group
    assert out["library/age_steps_10to100/admitted_share"] == 0.5  # age 10
    assert out["library/age_hours_lt1/transferred"] == 2
    assert out["library/age_hours_1to24/admitted"] == 1
    assert out["library/age_hours_24to168/admitted_share"] == 1.0
    assert staleness_metrics(now, [], [], []) == {
        "library/age_steps/count": 0.0,
        "library/age_hours/count": 0.0,
    }


def test_a_step_age_counts_the_source_runs_own_steps(tmp_path):
    # run "s" stored steps 0..2, run "t" step 5 only, "u" is an import without steps
    where = [("s", 0), ("s", 1), ("s", 2), ("t", 5), ("u", None)]
    problems = [f"Problem {j}." for j in range(len(where))]
    groups = [
        dataclasses.replace(
            stored(f"{source}{step}", 1.0, step),
            key=prompt_key(problem),
            problem=problem,
            source=source,
            logprobs=[np.array([-1.0])] * 2,
            logprob_origins=["generation"] * 2,
        )
        for (source, step), problem in zip(where, problems, strict=True)
    ]
    write_library(groups, tmp_path / "lib", append=False)
    config = dataclasses.replace(algorithms.preset("graft-library"), n=2)
    source = LibrarySource(str(tmp_path / "lib"), "most_recent", None, problems, config)
    receiver = AgentRollouts(
        agent="r", prompt_ids=problems, prompts=problems, texts=[["x", "y"]] * 5,
        token_ids=[[[1], [1]]] * 5, logprobs=[[np.array([-1.0])] * 2] * 5,
        finish_reasons=[["stop"] * 2] * 5, rewards=np.zeros((5, 2)),
    )  # fmt: skip

    def verify(indices, texts):  # one success in each stored group: Eq.4 takes them all
        return {LIBRARY_AGENT: np.tile([1.0, 0.0], (len(indices), 1))}, {}

    lookup = source.lookup(receiver, list(range(5)), verify)
    # (the receiver is at its step 0: its steps count other updates than the sources')
    assert lookup.step_ages == {0: 2, 1: 1, 2: 0, 3: 0, 4: None}
