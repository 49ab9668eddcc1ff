"""What the step estimate is asked about (A1, A2 of `step_estimate`): the responses' length
mix, one agent's step (prompts x n, minibatches, peer rows, padding) and the agent itself
(its model, options, GPUs and rollout backend)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from algorithms.training.memory_plan import Architecture
from graft_env.policies.options import HFPolicyOptions, VLLMEngineOptions

ENGINE_DEFAULTS = VLLMEngineOptions()


@dataclass(frozen=True)
class LengthMix:
    """Response lengths (A1): `cut_share` at the cap, the rest log-normal, capped."""

    prompt_tokens: int = 140
    cap: int = 4096
    cut_share: float = 0.15
    median: float = 160.0
    sigma: float = 0.8

    def survival(self, s: int) -> float:
        """P(response length > s), s >= 0."""
        if s >= self.cap:
            return 0.0
        if s <= 0:
            return 1.0
        z = (math.log(s) - math.log(self.median)) / self.sigma
        return self.cut_share + (1 - self.cut_share) * 0.5 * math.erfc(z / math.sqrt(2))

    @cached_property
    def survivals(self) -> tuple[float, ...]:
        return tuple(self.survival(s) for s in range(self.cap))

    @property
    def mean_response(self) -> float:
        return sum(self.survivals)

    @property
    def mean_row(self) -> float:
        return self.prompt_tokens + self.mean_response

    @property
    def mean_position(self) -> float:
        """The token-weighted mean position in a row (prompt + response): E[T^2] / 2E[T]."""
        p = self.prompt_tokens
        # E[T^2] = p^2 + 2p E[L] + E[L^2], E[L^2] = sum_s (2s + 1) P(L > s)
        second = sum((2 * s + 1) * q for s, q in enumerate(self.survivals))
        return (p * p + 2 * p * self.mean_response + second) / (2 * self.mean_row)

    @property
    def decode_position(self) -> float:
        """The mean position of a decoded token (its row's KV length then): sum_s P(L > s)
        (p + s) / E[L], the mean context a busy decode slot holds (A5)."""
        p = self.prompt_tokens
        return sum(q * (p + s) for s, q in enumerate(self.survivals)) / self.mean_response

    def block_steps(self, rows: int) -> float:
        """Expected decode steps of a block of `rows` rows (until its longest row ends)."""
        return sum(1 - (1 - q) ** rows for q in self.survivals)


@dataclass(frozen=True)
class StepWorkload:
    """One step of one agent (A1, A2)."""

    prompts: int = 128
    n: int = 8
    num_minibatches: int = 4
    peer_prompts: int = 16
    padding: float = 1.15
    mix: LengthMix = field(default_factory=LengthMix)

    @property
    def rows(self) -> int:
        return self.prompts * self.n

    @property
    def peer_rows(self) -> int:
        return min(self.peer_prompts, self.prompts) * self.n


@dataclass(frozen=True)
class Agent:
    """One agent as the estimate sees it: its model, options and GPUs."""

    name: str
    arch: Architecture
    options: HFPolicyOptions
    gpus: int = 1
    group: bool = False  # a worker group (FSDP2 over `gpus` ranks): always two-pass updates
    rollout_backend: str = "transformers"
    max_num_seqs: int = ENGINE_DEFAULTS.max_num_seqs  # vllm_max_num_seqs: decode slots (A5)
    sync_bucket_mb: float = ENGINE_DEFAULTS.sync_bucket_mb  # vllm_sync_bucket_mb (A9)
