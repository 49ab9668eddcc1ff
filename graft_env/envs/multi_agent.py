"""Multi-agent training environment (PettingZoo parallel API).

Every agent (one per policy) receives the same batch of prompts each step and
answers each with a group of n responses; the step returns, per agent, the reward
matrix [prompts, n] and the success counts k. The prompt batch of step t is
`prompt_batch_indices(len(dataset), batch_size, seed, t)`, a pure function of
(dataset, seed, step), so two runs trained apart see the same prompts — the
stored-peer variant (GRAFT-SPEC §9) relies on it.

Observations are the formatted prompts, one tuple per agent, because each policy
may wrap the same problem in its own chat template (``formatters``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from graft_env.data import Problem
from graft_env.envs.math_env import RESPONSE_CHARSET, text_space
from graft_env.envs.problems import resolve_problems
from graft_env.envs.schedule import prompt_batch_indices
from graft_env.prompts import format_prompt
from graft_env.rewards import VerifierPool, status_counts, verify_batch


class MultiAgentMathEnv(ParallelEnv):
    """Shared prompt batches for several policies, group rewards per agent.

    Args:
        agents: agent (policy) names.
        dataset, split, data_dir, dataset_options: as for ``MathReasoningEnv``.
        batch_size: prompts per step. n: responses per prompt (group size).
        num_steps: steps per episode (default: one pass over the dataset).
        seed: schedule seed; ``reset(seed=...)`` overrides it.
        formatters: per-agent problem -> prompt callables (default: plain template).
        max_response_chars: length bound of the action space.
        verifier: a VerifierPool to use (default: the process-wide pool).

    ``reset(options={"start_step": t})`` starts at step t (used when resuming).
    """

    metadata = {"name": "graft_multi_agent_math_v0", "render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        agents: Sequence[str] = ("a", "b"),
        dataset: str | Sequence[Problem] = "procedural",
        split: str | None = None,
        data_dir: str | os.PathLike | None = None,
        dataset_options: Mapping[str, Any] | None = None,
        batch_size: int = 8,
        n: int = 8,
        num_steps: int | None = None,
        seed: int = 0,
        formatters: Mapping[str, Callable[[str], str]] | None = None,
        max_response_chars: int = 8192,
        verifier: VerifierPool | None = None,
    ) -> None:
        if not agents or len(set(agents)) != len(agents):
            raise ValueError(f"agents must be non-empty and unique, got {list(agents)}")
        if batch_size <= 0 or n <= 0:
            raise ValueError(f"batch_size and n must be positive, got {batch_size}, {n}")
        self.possible_agents = list(agents)
        self.agents: list[str] = []
        self.problems = resolve_problems(dataset, split, data_dir, dataset_options)
        self.batch_size, self.n, self.seed = batch_size, n, seed
        self.num_steps = num_steps or max(1, len(self.problems) // batch_size)
        formatters = dict(formatters or {})
        unknown = set(formatters) - set(agents)
        if unknown:
            raise ValueError(f"formatters given for unknown agents {sorted(unknown)}")
        self._prompts = {
            agent: [formatters.get(agent, format_prompt)(p.problem) for p in self.problems]
            for agent in agents
        }
        self._obs_spaces = {
            agent: spaces.Tuple([text_space(prompts)] * batch_size)
            for agent, prompts in self._prompts.items()
        }
        response = spaces.Text(
            max_length=max_response_chars, min_length=1, charset=RESPONSE_CHARSET
        )
        self._action_space = spaces.Tuple([spaces.Tuple([response] * n)] * batch_size)
        self._verifier = verifier
        self.step_index = 0
        self._batch: np.ndarray | None = None

    def observation_space(self, agent: str) -> spaces.Space:
        # PettingZoo requires the same object on every call: built once in __init__.
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_space

    def batch_problems(self, step: int) -> list[Problem]:
        """The problems of training step `step`."""
        indices = prompt_batch_indices(len(self.problems), self.batch_size, self.seed, step)
        return [self.problems[i] for i in indices]

    def _observe(self) -> tuple[dict[str, tuple[str, ...]], dict[str, dict[str, Any]]]:
        self._batch = prompt_batch_indices(
            len(self.problems), self.batch_size, self.seed, self.step_index
        )
        ids = [self.problems[i].id for i in self._batch]
        obs = {a: tuple(self._prompts[a][i] for i in self._batch) for a in self.agents}
        infos = {a: {"step": self.step_index, "prompt_ids": ids} for a in self.agents}
        return obs, infos

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self.seed = seed
        self.agents = list(self.possible_agents)
        self.step_index = int((options or {}).get("start_step", 0))
        return self._observe()

    def prompts_for(self, agent: str, indices: Sequence[int]) -> tuple[str, ...]:
        """`agent`'s formatted prompts of the dataset items `indices`."""
        return tuple(self._prompts[agent][i] for i in indices)

    def score_groups(
        self, indices: Sequence[int], groups: Mapping[str, Sequence[Sequence[str]]]
    ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        """Verify each agent's groups for dataset items `indices` in one verifier batch.

        Returns per agent the rewards [len(indices), n] and an info dict with k,
        per-response statuses and extracted answers, and status counts.
        """
        golds = [self.problems[i].answer for i in indices]
        responses, targets = [], []
        for agent, agent_groups in groups.items():
            if len(agent_groups) != len(indices) or any(len(g) != self.n for g in agent_groups):
                raise ValueError(
                    f"agent {agent!r}: expected {len(indices)} groups of {self.n} responses, "
                    f"got group sizes {[len(g) for g in agent_groups]}"
                )
            responses += [r for g in agent_groups for r in g]
            targets += [g for g in golds for _ in range(self.n)]
        verify = self._verifier.verify_batch if self._verifier else verify_batch
        verdicts = verify(responses, targets)
        rewards, infos = {}, {}
        per_agent = len(indices) * self.n
        for position, agent in enumerate(groups):
            mine = verdicts[position * per_agent : (position + 1) * per_agent]
            reward = np.array([v.reward for v in mine], dtype=np.float64)
            rewards[agent] = reward.reshape(len(indices), self.n)
            infos[agent] = {
                "k": rewards[agent].sum(axis=1).astype(np.int64),
                "statuses": [v.status for v in mine],
                "extracted": [v.extracted for v in mine],
                "status_counts": status_counts(mine),
            }
        return rewards, infos

    def step(self, actions: Mapping[str, Sequence[Sequence[str]]]):
        """Verify every agent's groups; returns rewards [prompts, n] and k per agent."""
        if self._batch is None or not self.agents:
            raise RuntimeError("call reset() before step()")
        missing = set(self.agents) - set(actions)
        if missing:
            raise ValueError(f"step() got no actions for agents {sorted(missing)}")
        rewards, infos = self.score_groups(self._batch, {a: actions[a] for a in self.agents})
        for info in infos.values():
            info["step"] = self.step_index
        self.step_index += 1
        done = self.step_index >= self.num_steps
        truncations = dict.fromkeys(self.agents, done)
        terminations = dict.fromkeys(self.agents, False)
        if done:
            obs = {a: tuple(self._prompts[a][i] for i in self._batch) for a in self.agents}
            self.agents = []
        else:
            obs, next_infos = self._observe()
            for agent in self.agents:
                infos[agent].update(next_prompt_ids=next_infos[agent]["prompt_ids"])
        return obs, rewards, terminations, truncations, infos
