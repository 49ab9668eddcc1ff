"""From policy generations and verifier verdicts to `AgentRollouts`, and the seeds.

Kept apart from the loop so the live path, dynamic sampling's refills (`refill`) and
anything else that builds rollouts share one constructor (`build_rollouts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from graft_env.envs import prompt_batch_indices
from graft_env.types import AgentRollouts

if TYPE_CHECKING:
    from graft_env.envs import MultiAgentMathEnv
    from graft_env.policies import Generation, Policy, SamplingParams


def sampling_seed(seed: int, step: int, agent_index: int, refill_round: int = 0) -> int:
    """The sampling seed of one agent at one step: independent streams, resumable.

    Derived only from (run seed, step, agent position, refill round), so a resumed
    run draws the same samples as an uninterrupted one without carrying RNG state
    across steps.
    """
    key = [seed, step, agent_index] + ([refill_round] if refill_round else [])
    return int(np.random.SeedSequence(key).generate_state(1)[0])


def refill_seed(seed: int, step: int) -> int:
    """Seed of the extra prompt stream that dynamic sampling draws refills from."""
    return int(np.random.SeedSequence([seed, step, 2**31 - 2]).generate_state(1)[0])


def step_rng(seed: int, step: int) -> np.random.Generator:
    """The algorithm's random stream for one step (random variants, ordering)."""
    return np.random.default_rng(np.random.SeedSequence([seed, step, 2**31 - 1]))


def build_rollouts(
    agent: str,
    prompt_ids: Sequence[str],
    prompts: Sequence[str],
    texts: Sequence[Sequence[str]],
    token_ids: Sequence[Sequence[Sequence[int]]],
    logprobs: Sequence[Sequence[np.ndarray]],
    finish_reasons: Sequence[Sequence[str]],
    rewards: np.ndarray,
) -> AgentRollouts:
    """An `AgentRollouts` with every response checked for a non-empty token list and
    a finish reason.

    A response without tokens has no mean log-likelihood and cannot be trained on,
    so it is a hard error naming the agent and position rather than a silent zero.
    """
    for p, group in enumerate(token_ids):
        if len(finish_reasons[p]) != len(group):
            raise ValueError(
                f"agent {agent!r}, prompt {p} ({prompt_ids[p]}): {len(group)} responses "
                f"and {len(finish_reasons[p])} finish reasons"
            )
        for i, ids in enumerate(group):
            if len(ids) == 0 or len(ids) != len(logprobs[p][i]):
                raise ValueError(
                    f"agent {agent!r}, prompt {p} ({prompt_ids[p]}), response {i}: "
                    f"{len(ids)} token ids and {len(logprobs[p][i])} log-probs"
                )
    return AgentRollouts(
        agent=agent,
        prompt_ids=list(prompt_ids),
        prompts=list(prompts),
        texts=[list(g) for g in texts],
        token_ids=[[list(ids) for ids in g] for g in token_ids],
        logprobs=[[np.asarray(lp, dtype=np.float64) for lp in g] for g in logprobs],
        finish_reasons=[list(g) for g in finish_reasons],
        rewards=np.asarray(rewards, dtype=np.float64),
    )


def response_texts(generations: Sequence[Sequence[Generation]]) -> list[list[str]]:
    """Each group's response texts: what the verifier scores and a peer re-tokenises."""
    return [[g.text for g in group] for group in generations]


def generated_rollouts(
    agent: str,
    prompt_ids: Sequence[str],
    prompts: Sequence[str],
    generations: Sequence[Sequence[Generation]],
    rewards: np.ndarray,
) -> AgentRollouts:
    """`build_rollouts` of a policy's sampled groups and their rewards."""
    return build_rollouts(
        agent,
        prompt_ids,
        prompts,
        response_texts(generations),
        [[g.token_ids for g in group] for group in generations],
        [[g.logprobs for g in group] for group in generations],
        [[g.finish_reason for g in group] for group in generations],
        rewards,
    )


def refill(
    rollouts: AgentRollouts,
    statuses: Sequence[str],
    env: MultiAgentMathEnv,
    policy: Policy,
    rounds: Sequence[SamplingParams],
    stream: int,
    batch_size: int,
) -> tuple[AgentRollouts, list[str], int]:
    """Dynamic sampling (DAPO): draw extra prompts until the batch has `batch_size`
    informative groups (0 < k < n) or every round is spent, round r sampling with
    `rounds[r]` (its own seed).

    Refill prompts come from their own deterministic stream (`refill_seed`), so resumed
    runs refill identically. Kept refill groups are appended to the rollouts and their
    statuses to `statuses`. Returns both and the number of responses the refills
    generated, kept or not.
    """
    n, name = rollouts.n, rollouts.agent
    need = batch_size - int(np.count_nonzero((rollouts.k > 0) & (rollouts.k < n)))
    statuses, drawn = list(statuses), 0
    for round_, sampling in enumerate(rounds):
        if need <= 0:
            break
        indices = prompt_batch_indices(len(env.problems), batch_size, stream, round_)
        prompts = list(env.prompts_for(name, indices))
        groups = policy.generate(prompts, n, sampling)
        drawn += sum(map(len, groups))
        rewards, infos = env.score_groups(indices, {name: response_texts(groups)})
        ids = [env.problems[i].id for i in indices]
        extra = generated_rollouts(name, ids, prompts, groups, rewards[name])
        keep = np.flatnonzero((extra.k > 0) & (extra.k < n))[:need].tolist()
        rollouts = append_groups(rollouts, extra, keep)
        statuses += [infos[name]["statuses"][p * n + i] for p in keep for i in range(n)]
        need -= len(keep)
    return rollouts, statuses, drawn


def append_groups(
    rollouts: AgentRollouts, extra: AgentRollouts, keep: Sequence[int]
) -> AgentRollouts:
    """`rollouts` followed by the groups `keep` of `extra` (dynamic-sampling refills)."""
    keep = list(keep)
    return AgentRollouts(
        agent=rollouts.agent,
        prompt_ids=rollouts.prompt_ids + [extra.prompt_ids[p] for p in keep],
        prompts=rollouts.prompts + [extra.prompts[p] for p in keep],
        texts=rollouts.texts + [extra.texts[p] for p in keep],
        token_ids=rollouts.token_ids + [extra.token_ids[p] for p in keep],
        logprobs=rollouts.logprobs + [extra.logprobs[p] for p in keep],
        finish_reasons=rollouts.finish_reasons + [extra.finish_reasons[p] for p in keep],
        rewards=np.concatenate([rollouts.rewards, extra.rewards[keep]], axis=0),
    )
