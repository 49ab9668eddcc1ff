"""The multi-agent environment: PettingZoo's contract test and the prompt schedule."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pettingzoo.test import parallel_api_test

from graft_env.data import Problem
from graft_env.envs import MultiAgentMathEnv, prompt_batch_indices

PROBLEMS = [
    Problem(id=f"p{i}", problem=f"Compute {i} + {i}.", answer=str(2 * i), dataset="toy", extra={})
    for i in range(10)
]


def test_passes_pettingzoo_parallel_api_test():
    env = MultiAgentMathEnv(agents=["a", "b"], dataset=PROBLEMS, batch_size=3, n=2, num_steps=3)
    parallel_api_test(env, num_cycles=5)


def test_every_agent_gets_the_same_prompts_and_group_rewards():
    env = MultiAgentMathEnv(
        agents=["a", "b"],
        dataset=PROBLEMS,
        batch_size=4,
        n=2,
        num_steps=2,
        formatters={"b": lambda p: f"<b>{p}"},
    )
    obs, infos = env.reset(seed=1)
    assert infos["a"]["prompt_ids"] == infos["b"]["prompt_ids"]
    assert all(o.startswith("<b>") for o in obs["b"])
    golds = {p.id: p.answer for p in PROBLEMS}
    answers = [golds[i] for i in infos["a"]["prompt_ids"]]
    actions = {
        "a": [[f"\\boxed{{{g}}}", "no idea"] for g in answers],
        "b": [["\\boxed{-1}", "\\boxed{-1}"] for _ in answers],
    }
    _, rewards, terms, truncs, step_infos = env.step(actions)
    assert rewards["a"].shape == (4, 2)
    np.testing.assert_array_equal(rewards["a"], [[1.0, 0.0]] * 4)
    np.testing.assert_array_equal(step_infos["a"]["k"], [1] * 4)
    np.testing.assert_array_equal(step_infos["b"]["k"], [0] * 4)
    assert step_infos["a"]["status_counts"]["no_answer"] == 4
    assert not any(terms.values()) and not any(truncs.values())


def test_wrong_group_shape_is_a_clear_error():
    env = MultiAgentMathEnv(agents=["a"], dataset=PROBLEMS, batch_size=2, n=3)
    env.reset()
    with pytest.raises(ValueError, match="expected 2 groups of 3"):
        env.step({"a": [["x"] * 3]})


def test_batches_depend_only_on_dataset_seed_and_step():
    env = MultiAgentMathEnv(agents=["a"], dataset=PROBLEMS, batch_size=4, n=1, seed=7)
    env.reset()
    first = env.batch_problems(5)
    _, infos = MultiAgentMathEnv(agents=["z"], dataset=PROBLEMS, batch_size=4, n=1, seed=7).reset(
        options={"start_step": 5}
    )
    assert [p.id for p in first] == infos["z"]["prompt_ids"]


@settings(max_examples=100, deadline=None)
@given(
    num_items=st.integers(1, 40),
    batch_size=st.integers(1, 16),
    seed=st.integers(0, 2**31),
    epochs=st.integers(1, 3),
)
def test_schedule_visits_every_item_once_per_epoch(num_items, batch_size, seed, epochs):
    total = num_items * epochs
    steps = -(-total // batch_size)
    seen = np.concatenate(
        [prompt_batch_indices(num_items, batch_size, seed, t) for t in range(steps)]
    )[:total]
    for e in range(epochs):
        assert sorted(seen[e * num_items : (e + 1) * num_items]) == list(range(num_items))
    np.testing.assert_array_equal(
        prompt_batch_indices(num_items, batch_size, seed, steps - 1),
        prompt_batch_indices(num_items, batch_size, seed, steps - 1),
    )
