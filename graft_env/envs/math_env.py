"""Single-prompt Gymnasium environment: one problem per episode, one answer, one reward.

The observation is the formatted prompt; the action is the response text; the
reward is 1.0 when the last ``\\boxed{}`` of the response verifies against the gold
answer (math-verify, in worker processes) and 0.0 otherwise. The verifier's status
and extracted answer come back in ``info`` so failures are visible, not silent.
"""

from __future__ import annotations

import os
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from graft_env.data import Problem
from graft_env.envs.problems import resolve_problems
from graft_env.prompts import format_prompt
from graft_env.rewards import VerifierPool, verify_batch

RESPONSE_CHARSET = frozenset(string.printable)


def text_space(texts: Sequence[str], max_length: int | None = None, extra: frozenset = frozenset()):
    """A Text space holding every text given (their characters plus `extra`)."""
    charset = frozenset("".join(texts)) | extra
    longest = max((len(t) for t in texts), default=1)
    return spaces.Text(max_length=max(longest, max_length or 0), min_length=1, charset=charset)


class MathReasoningEnv(gym.Env):
    """``graft_env/MathReasoning-v0``: answer one math problem per episode.

    Args:
        dataset: registry name (see ``graft_env.data.available()``) or a list of Problems.
        split, data_dir, dataset_options: passed to ``graft_env.data.load``.
        tokenizer: optional tokenizer whose chat template formats the prompt.
        formatter: optional callable problem -> prompt (overrides `tokenizer`).
        max_response_chars: length bound of the action space.
        verifier: a VerifierPool to use (default: the process-wide pool).
    """

    metadata = {"render_modes": []}  # noqa: RUF012 - Gymnasium's own convention

    def __init__(
        self,
        dataset: str | Sequence[Problem] = "procedural",
        split: str | None = None,
        data_dir: str | os.PathLike | None = None,
        dataset_options: Mapping[str, Any] | None = None,
        tokenizer: Any | None = None,
        formatter: Callable[[str], str] | None = None,
        max_response_chars: int = 8192,
        verifier: VerifierPool | None = None,
    ) -> None:
        self.problems = resolve_problems(dataset, split, data_dir, dataset_options)
        self._format = formatter or (lambda problem: format_prompt(problem, tokenizer))
        self.prompts = [self._format(p.problem) for p in self.problems]
        self.observation_space = text_space(self.prompts)
        self.action_space = spaces.Text(
            max_length=max_response_chars, min_length=1, charset=RESPONSE_CHARSET
        )
        self._verifier = verifier
        self._index: int | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode on a random problem, or on ``options["index"]``."""
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(len(self.problems)))
        elif not 0 <= index < len(self.problems):
            raise IndexError(f"options['index']={index} outside 0..{len(self.problems) - 1}")
        self._index = int(index)
        problem = self.problems[self._index]
        return self.prompts[self._index], {"id": problem.id, "dataset": problem.dataset}

    def step(self, action: str):
        """Score the response; the episode always ends after one answer."""
        if self._index is None:
            raise RuntimeError("call reset() before step()")
        if not isinstance(action, str):
            raise TypeError(f"action must be the response text (str), got {type(action).__name__}")
        problem, prompt = self.problems[self._index], self.prompts[self._index]
        verify = self._verifier.verify_batch if self._verifier else verify_batch
        (verdict,) = verify([action], [problem.answer])
        self._index = None
        info = {
            "id": problem.id,
            "dataset": problem.dataset,
            "status": verdict.status,
            "extracted": verdict.extracted,
        }
        return prompt, float(verdict.reward), True, False, info
