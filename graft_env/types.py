"""Data that flows between the loop, the exchange strategies and the losses.

These types are the seams of the system: the loop fills `AgentRollouts` from the
policies and the verifier, an exchange strategy turns them into `TransferredGroup`s
per receiver, and the algorithm packs each agent's own groups and what it received
into a `TrainBatch` that the policy's `update` consumes minibatch by minibatch.
Only strings, token ids and floats live here, so they can cross process or Ray
actor boundaries unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

FINISH_REASONS = ("stop", "length")
"""Why a sampled response ended (vLLM's names): "stop" = the model emitted its EOS,
"length" = it was cut at `max_new_tokens`."""


@dataclass
class AgentRollouts:
    """One agent's rollouts for one step's shared prompt batch.

    Index `[p][i]` is response `i` of prompt `p`; every prompt has exactly `n`
    responses. `logprobs[p][i][t]` is the behaviour policy's log-probability of
    token `token_ids[p][i][t]` as recorded while sampling (the distribution the
    policy documents, e.g. after temperature). `finish_reasons[p][i]` (one of
    `FINISH_REASONS`) says whether the response ended with the agent's EOS, so a
    receiver re-tokenises it with its own EOS only then.

    The rollout correction (a run's `rollout_correction`) sets `train_logprobs[p][i]`, the
    trainer's log-probs of the same tokens at θ_old that its own rows train against, and
    `rollout_weights[p][i]`, their per-token importance weights; either is None for a
    response it left as sampled, and both are None without it.
    """

    agent: str
    prompt_ids: list[str]
    prompts: list[str]
    texts: list[list[str]]
    token_ids: list[list[list[int]]]
    logprobs: list[list[np.ndarray]]
    finish_reasons: list[list[str]]
    rewards: np.ndarray
    advantages: np.ndarray | None = None
    train_logprobs: list[list[np.ndarray | None]] | None = None
    rollout_weights: list[list[np.ndarray | None]] | None = None

    def __post_init__(self) -> None:
        self.rewards = np.asarray(self.rewards, dtype=np.float64)
        if self.rewards.ndim != 2:
            raise ValueError(
                f"AgentRollouts({self.agent!r}).rewards must be [prompts, n], "
                f"got shape {self.rewards.shape}"
            )
        if not np.isin(self.rewards, (0.0, 1.0)).all():
            bad = self.rewards[~np.isin(self.rewards, (0.0, 1.0))]
            raise ValueError(
                f"AgentRollouts({self.agent!r}).rewards must be binary (0 or 1: correct or not), "
                f"got {bad[:5].tolist()}"
            )
        num_prompts = self.rewards.shape[0]
        for name in ("prompt_ids", "prompts", "texts", "token_ids", "logprobs", "finish_reasons"):
            if len(getattr(self, name)) != num_prompts:
                raise ValueError(
                    f"AgentRollouts({self.agent!r}).{name} has {len(getattr(self, name))} "
                    f"prompts, rewards has {num_prompts}"
                )
        unknown = {r for group in self.finish_reasons for r in group} - set(FINISH_REASONS)
        if unknown:
            raise ValueError(
                f"AgentRollouts({self.agent!r}).finish_reasons must be in {FINISH_REASONS}, "
                f"got {sorted(unknown)}"
            )

    @property
    def n(self) -> int:
        """Group size: responses per prompt."""
        return int(self.rewards.shape[1])

    @property
    def k(self) -> np.ndarray:
        """Success count per prompt, k_M(q) in the paper."""
        return (self.rewards == 1.0).sum(axis=1).astype(np.int64)

    def with_rewards(self, rewards: np.ndarray) -> AgentRollouts:
        """The same responses with other rewards (a stored peer's, verified again)."""
        return AgentRollouts(
            self.agent,
            self.prompt_ids,
            self.prompts,
            self.texts,
            self.token_ids,
            self.logprobs,
            self.finish_reasons,
            rewards,
        )

    def mean_logp(self, p: int, i: int) -> float:
        """Average generation log-probability per token of response (p, i)."""
        lp = np.asarray(self.logprobs[p][i], dtype=np.float64)
        if lp.size == 0:
            raise ValueError(f"agent {self.agent!r}: response ({p}, {i}) has no tokens")
        return float(lp.mean())


@dataclass(frozen=True)
class ScoredText:
    """A response string scored by a receiver under its own tokenizer and π_old."""

    token_ids: list[int]
    logprobs: np.ndarray

    @property
    def mean_logp(self) -> float:
        if len(self.logprobs) == 0:
            raise ValueError("scored text has no tokens")
        return float(np.mean(self.logprobs))


Scorer = Callable[[str, Sequence[int], Sequence[str], Sequence[str]], list[ScoredText]]
"""`scorer(receiver, prompt_indices, texts, finish_reasons)` scores `texts[j]` as a
response to prompt `prompt_indices[j]` under the receiver's behaviour policy π_old^R,
tokenised as the source ended it: with the receiver's EOS iff `finish_reasons[j]` is
"stop"."""


@dataclass
class TransferredGroup:
    """A source group (or part of one) handed to a receiver for one prompt.

    `advantages` are the source-computed advantages (never re-normalised).
    `weights[j] == 0` means response j was removed before optimisation; it then
    counts in neither numerator nor denominator of the loss.
    """

    prompt_index: int
    source: str
    response_indices: np.ndarray
    texts: list[str]
    advantages: np.ndarray
    weights: np.ndarray
    scored: list[ScoredText] = field(default_factory=list)
    clip: bool = True


@dataclass(frozen=True)
class TrainSequence:
    """One response as the receiver trains on it, on the receiver's tokenisation.

    `rollout_weights[t]` multiplies token t's surrogate term: the rollout correction's
    importance weight between the engine that sampled an own response and the trainer
    (`algorithms.core.rollout_correction`); None means 1 on every token.
    """

    prompt_index: int
    response_token_ids: list[int]
    old_logprobs: np.ndarray
    advantage: float
    weight: float = 1.0
    is_peer: bool = False
    source: str = ""
    clip: bool = True
    policy_gradient: bool = True
    nll: bool = False
    rollout_weights: np.ndarray | None = None


@dataclass
class TrainBatch:
    """Everything one agent trains on in one step, with the minibatch order fixed.

    `minibatches` lists indices into `sequences` in the order they must run.
    """

    agent: str
    prompts: list[str]
    sequences: list[TrainSequence]
    minibatches: list[list[int]]
