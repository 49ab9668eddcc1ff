"""The single-prompt Gymnasium environment against Gymnasium's own contract test."""

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import graft_env  # noqa: F401 - registers the environment
from graft_env.data import Problem

PROBLEMS = [
    Problem(id="p0", problem="Compute 12 + 30.", answer="42", dataset="toy", extra={}),
    Problem(id="p1", problem="Compute 7 * 6 + 1.", answer="43", dataset="toy", extra={}),
]


def make(**kwargs):
    return gymnasium.make("graft_env/MathReasoning-v0", **kwargs).unwrapped


def test_passes_gymnasium_check_env():
    check_env(make(dataset="procedural", split="test", dataset_options={"size": 5}))


def test_correct_answer_scores_one_and_ends_the_episode():
    env = make(dataset=PROBLEMS)
    obs, info = env.reset(options={"index": 0})
    assert "Compute 12 + 30." in obs and "\\boxed{}" in obs
    assert info == {"id": "p0", "dataset": "toy"}
    _, reward, terminated, truncated, info = env.step("12 + 30 = 42, so \\boxed{42}")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["status"] == "ok" and info["extracted"] == "42"


def test_wrong_and_missing_answers_score_zero_with_their_status():
    env = make(dataset=PROBLEMS)
    env.reset(options={"index": 1})
    _, reward, _, _, info = env.step("\\boxed{42}")
    assert reward == 0.0 and info["status"] == "ok"
    env.reset(options={"index": 1})
    _, reward, _, _, info = env.step("I do not know")
    assert reward == 0.0 and info["status"] == "no_answer"


def test_seeded_resets_are_deterministic():
    env = make(dataset="procedural", split="test", dataset_options={"size": 50})
    first = [env.reset(seed=s)[1]["id"] for s in range(5)]
    again = [env.reset(seed=s)[1]["id"] for s in range(5)]
    assert first == again and len(set(first)) > 1


def test_step_before_reset_is_an_error():
    with pytest.raises(RuntimeError, match="reset"):
        make(dataset=PROBLEMS).step("\\boxed{1}")


def test_loads_a_real_benchmark(data_dir):
    env = make(dataset="math500", data_dir=data_dir)
    assert len(env.problems) == 500
    obs, info = env.reset(seed=3)
    assert info["dataset"] == "math500" and obs.endswith("\\boxed{}.\n")
