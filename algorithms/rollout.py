"""From policy generations and verifier verdicts to `AgentRollouts`.

Kept apart from the loop so the live path and the stored-peer path (which builds
rollouts from a trajectory log instead of a policy) share one constructor.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from algorithms.types import AgentRollouts


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
