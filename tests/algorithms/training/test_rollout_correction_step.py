"""`correct_rollouts` with a scripted policy: what it sets on own rollouts, what it leaves as
sampled and counts, and its metrics (no model: the tiny-pair tests are in
test_rollout_correction_loop.py)."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.core import correction_weights
from algorithms.rollouts import build_rollouts
from algorithms.training.run_config import RolloutCorrectionSpec
from algorithms.training.step import correct_rollouts
from graft_env.types import ScoredText

SAMPLED = {  # text -> (sampled token ids, engine log-probs)
    "ab": ([1, 2, 9], [-1.0, -2.0, -0.5]),
    "c": ([3, 9], [-0.3, -0.1]),
    "split": ([4, 5], [-1.5, -1.5]),  # the trainer's tokenizer splits this text otherwise
    "": ([7], [-2.0]),  # special tokens only, cut at max_new_tokens: nothing to score
}
TRAINER = {"ab": [-1.5, -1.0, -0.5], "c": [-0.3, -0.2], "split": [-1.0]}
RETOKENISED = {"split": [6]}


class ScriptedPolicy:
    """`score` from the tables above; it records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def score(self, prompts, responses, finish_reasons):
        self.asked += list(responses)
        assert all(p == "prompt" for p in prompts)
        return [
            ScoredText(RETOKENISED.get(t, SAMPLED[t][0]), np.array(TRAINER[t])) for t in responses
        ]


def rollouts():
    texts = [["ab", "c"], ["split", ""]]
    return build_rollouts(
        "a",
        ["q0", "q1"],
        ["prompt", "prompt"],
        texts,
        [[SAMPLED[t][0] for t in group] for group in texts],
        [[np.array(SAMPLED[t][1]) for t in group] for group in texts],
        [["stop", "stop"], ["stop", "length"]],
        np.array([[1.0, 0.0], [0.0, 1.0]]),
    )


@pytest.mark.parametrize("mode", ["monitor", "truncate", "mask"])
def test_own_rollouts_get_the_trainers_logprobs_and_weights_unless_monitoring(mode):
    policy, own = ScriptedPolicy(), rollouts()
    spec = RolloutCorrectionSpec(mode=mode, cap=1.5)
    corrected, metrics = correct_rollouts({"a": policy}, {"a": own}, spec)
    own, [metrics] = corrected["a"], metrics.values()
    assert policy.asked == ["ab", "c", "split"]  # the empty, cut response is never scored
    engine = np.array([[-1.0, -2.0, -0.5], [-0.3, -0.1, 0.0]])
    trainer = np.array([[-1.5, -1.0, -0.5], [-0.3, -0.2, 0.0]])
    mask = np.array([[1, 1, 1], [1, 1, 0]])
    expected = correction_weights(engine, trainer, mask, mode, "token", 1.5)
    assert metrics == {
        **{f"rollout_correction/{k}": v for k, v in expected.metrics.items()},
        "rollout_correction/retokenised": 2.0,
    }
    if mode == "monitor":
        assert own.train_logprobs is None and own.rollout_weights is None
        return
    assert own.train_logprobs[1] == own.rollout_weights[1] == [None, None]
    for i, length in enumerate((3, 2)):
        np.testing.assert_array_equal(own.train_logprobs[0][i], trainer[i, :length])
        np.testing.assert_array_equal(own.rollout_weights[0][i], expected.weights[i, :length])


def test_sequence_level_and_the_cap_reach_the_weights():
    own = rollouts()
    spec = RolloutCorrectionSpec(mode="truncate", level="sequence", cap=3.0)
    own = correct_rollouts({"a": ScriptedPolicy()}, {"a": own}, spec)[0]["a"]
    np.testing.assert_allclose(own.rollout_weights[0][0], [np.exp(0.5)] * 3)  # Σ d = 0.5
    np.testing.assert_allclose(own.rollout_weights[0][1], [np.exp(-0.1)] * 2)
