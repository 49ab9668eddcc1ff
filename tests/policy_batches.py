"""Small train batches and parameter snapshots shared by the policy tests."""

from __future__ import annotations

import torch

from graft_env.policies.base import SamplingParams
from graft_env.types import TrainBatch, TrainSequence

PROBLEMS = ["What is 2 + 3?", "What is 41 + 17?"]


def alternating_batch(agent: str, prompts: list[str], groups) -> TrainBatch:
    """One minibatch of every response in `groups` (per prompt, its generations), with
    advantages alternating +1 / -1."""
    sequences = [
        TrainSequence(
            prompt_index=p,
            response_token_ids=gen.token_ids,
            old_logprobs=gen.logprobs,
            advantage=1.0 if i % 2 == 0 else -1.0,
        )
        for p, group in enumerate(groups)
        for i, gen in enumerate(group)
    ]
    return TrainBatch(
        agent=agent,
        prompts=prompts,
        sequences=sequences,
        minibatches=[list(range(len(sequences)))],
    )


def rollout_batch(policy, seed: int = 0) -> TrainBatch:
    """A fixed GRPO-style batch from the policy's own samples, with alternating advantages."""
    prompts = [policy.format_prompt(p) for p in PROBLEMS]
    groups = policy.generate(prompts, 4, SamplingParams(max_new_tokens=12, seed=seed))
    return alternating_batch(policy.name, prompts, groups)


def parameters(policy) -> list[torch.Tensor]:
    return [p.detach().clone() for p in policy.model.parameters()]
