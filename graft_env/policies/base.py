"""The Policy interface: the only thing the training loop knows about a model.

Which distribution the log-probabilities come from
--------------------------------------------------
Every log-probability a policy reports — recorded while sampling
(`Generation.logprobs`), returned by `score`, and computed by the training forward
inside `update` — is ``log softmax(logits / policy.temperature)`` of the chosen
token, taken *before* any top-p truncation. `policy.temperature` is a fixed
attribute set from the policy's options, not from `SamplingParams`. So the three
paths always agree (up to float rounding: the tests hold them to 1e-4 in fp32),
which is what the PPO/GRAFT ratio π_θ/π_old and the compatibility weight need.

`SamplingParams.temperature` and `top_p` shape only which token is drawn. When
they equal the policy's temperature and 1.0 (training rollouts: both 1.0 in the
paper) the recorded log-probs are exactly the behaviour distribution; for
evaluation sampling (0.6 / 0.95) they are still reported under the policy's
temperature, so numbers from different sampling settings stay comparable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar, runtime_checkable

import numpy as np
import torch

from graft_env.types import FINISH_REASONS, ScoredText, TrainBatch, TrainSequence

LossFn = Callable[[torch.Tensor, Sequence[TrainSequence]], tuple[torch.Tensor, dict]]
"""`loss_fn(new_logp [B, T] right-padded with 0, sequences) -> (scalar loss, stats)`.

A loss that `training.wants_reference` (`Algorithm.loss` when its algorithm
`needs_reference`) is also given `ref_logp=`: the same [B, T] tokens' log-probs under
the frozen reference model, padded alike.
"""


@dataclass(frozen=True)
class SamplingParams:
    """How to draw tokens. `temperature == 0` means greedy decoding.

    `seed` fixes every random draw: the same seed, weights, prompts, `n` and
    policy options give the same generations.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(
                f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}"
            )


@dataclass(frozen=True)
class Generation:
    """One sampled response.

    `token_ids` are the sampled tokens, including the EOS token when
    `finish_reason == "stop"`; `logprobs[t]` is the log-probability of
    `token_ids[t]` (see the module docstring for the distribution). `text` is the
    decoded response without special tokens — what a peer re-tokenises.
    """

    text: str
    token_ids: list[int]
    logprobs: np.ndarray
    finish_reason: str

    def __post_init__(self) -> None:
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(
                f"Generation.finish_reason must be one of {FINISH_REASONS}, "
                f"got {self.finish_reason!r}"
            )
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Generation has {len(self.token_ids)} token ids but {len(self.logprobs)} log-probs"
            )


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Pending(Protocol[T_co]):
    """A result that may still be computing; `result()` waits for it (and raises what the
    computation raised)."""

    def result(self) -> T_co: ...


class Done(Generic[T]):
    """A `Pending` that is already finished: what a policy computing in the caller's
    process returns from its `*_async` methods."""

    def __init__(self, value: T) -> None:
        self.value = value

    def result(self) -> T:
        return self.value


@runtime_checkable
class Policy(Protocol):
    """A language model that samples, scores, trains and checkpoints itself."""

    name: str
    temperature: float

    def format_prompt(self, problem: str) -> str:
        """The problem wrapped in the paper's instruction and this model's template."""
        ...

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        """For each formatted prompt, a group of `n` sampled responses."""
        ...

    def generate_async(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> Pending[list[list[Generation]]]:
        """`generate`, started: the loop starts every policy's sampling before it waits for
        any, so policies in other processes (Ray actors) sample at once; one in this
        process returns its groups already `Done`."""
        ...

    def score(
        self, prompts: Sequence[str], responses: Sequence[str], finish_reasons: Sequence[str]
    ) -> list[ScoredText]:
        """Per-token log-probs of `responses[j]` after `prompts[j]`, on this tokenizer.

        The response string is tokenised as is (nothing stripped); this tokenizer's
        EOS follows it iff `finish_reasons[j] == "stop"`, i.e. as the source's
        generation ended: a response cut at `max_new_tokens` gets none.
        """
        ...

    def update(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        """One optimisation pass over `batch.minibatches`, in order; returns metrics."""
        ...

    def update_async(self, batch: TrainBatch, loss_fn: LossFn) -> Pending[dict[str, float]]:
        """`update`, started, as `generate_async` is (every policy trains at once)."""
        ...

    def save(self, path: str | Path) -> None:
        """Write weights, tokenizer, options and optimizer state to directory `path`."""
        ...

    def load(self, path: str | Path) -> None:
        """Restore what `save` wrote (weights and optimizer state) into this policy."""
        ...
