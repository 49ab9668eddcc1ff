"""A scorer that can also draw more groups from an agent: what the twin-peer control needs.

The training loop passes every strategy a `ResamplingScorer`. Called, it is the plain
`Scorer` (a receiver re-scores texts under its π_old); `resample(agent, prompt_indices,
round)` has the agent's own policy, at its current weights, answer prompts of this step's
batch again: n new responses per prompt, verified by the environment, as `AgentRollouts`
over exactly those prompts (rewards filled, no advantages). Round r samples with its own
seed, `sampling_seed(run seed, step, agent index, RESAMPLE_ROUND_BASE + r)`, so the draws
are independent of the step's first sampling and reproducible on resume. Strategies that
never resample (all but `graft-twin`) see no difference.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from algorithms.rollouts import generated_rollouts, response_texts, sampling_seed
from graft_env.envs import prompt_batch_indices
from graft_env.types import AgentRollouts, ScoredText, Scorer

if TYPE_CHECKING:
    from graft_env.envs import MultiAgentMathEnv
    from graft_env.policies import Policy, SamplingParams

RESAMPLE_ROUND_BASE = 1000
"""Resample round r uses sampling round RESAMPLE_ROUND_BASE + r (dynamic sampling's refills
use rounds 1..dynamic_max_rounds; the first draw is round 0)."""

Resample = Callable[[str, Sequence[int], int], AgentRollouts]
"""`resample(agent, prompt_indices, round)`: the agent's new groups on those prompts."""


@dataclass(frozen=True)
class ResamplingScorer:
    """A `Scorer` (calling it scores) that can also `resample` an agent's groups."""

    score: Scorer
    resample: Resample

    def __call__(
        self,
        receiver: str,
        prompt_indices: Sequence[int],
        texts: Sequence[str],
        finish_reasons: Sequence[str],
    ) -> list[ScoredText]:
        return self.score(receiver, prompt_indices, texts, finish_reasons)


def loop_resampler(
    policies: Mapping[str, Policy],
    env: MultiAgentMathEnv,
    sampling: Callable[[int], SamplingParams],
    rollouts: Mapping[str, AgentRollouts],
    *,
    seed: int,
    batch_size: int,
    n: int,
    step: int,
) -> Resample:
    """The training loop's `resample` for `step` of a run with `seed` and `batch_size`: a
    live agent's policy answers prompts of the step's batch (`rollouts[agent]`'s prompt texts)
    n times with `sampling(sampling seed)`, and the environment verifies them."""
    agents = list(policies)
    indices = prompt_batch_indices(len(env.problems), batch_size, seed, step)

    def resample(agent: str, prompt_indices: Sequence[int], round_: int) -> AgentRollouts:
        if agent not in policies:
            raise ValueError(f"resample: {agent!r} is not a live agent; live agents: {agents}")
        own, batch = rollouts[agent], [int(indices[p]) for p in prompt_indices]
        ids = [own.prompt_ids[p] for p in prompt_indices]
        if [env.problems[i].id for i in batch] != ids:
            raise ValueError(f"resample at step {step}: {agent!r}'s prompts are not the batch's")
        draw = sampling_seed(seed, step, agents.index(agent), RESAMPLE_ROUND_BASE + round_)
        prompts = [own.prompts[p] for p in prompt_indices]
        groups = policies[agent].generate(prompts, n, sampling(draw))
        rewards, _ = env.score_groups(batch, {agent: response_texts(groups)})
        return generated_rollouts(agent, ids, prompts, groups, rewards[agent])

    return resample
