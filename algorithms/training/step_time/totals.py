"""A step's estimate as `estimate_step` returns it: its phases (each agent's seconds, the
step's), the totals with either rollout backend, and the target against the paper stack."""

from __future__ import annotations

from dataclasses import dataclass

from algorithms.training.step_time.anchors import Gpu
from algorithms.training.step_time.workload import Agent

PAPER_STACK_S = (150.0, 240.0)
"""The paper stack's step (verl, 4 x H200, FSDP + vLLM at TP=2): ~2.5-4 min (issue 28)."""
TARGET_FACTOR = 1.5
TARGET_S = TARGET_FACTOR * PAPER_STACK_S[1]


@dataclass(frozen=True)
class Phase:
    """One phase: each agent's seconds, the step's (max when agents run at once, else sum)."""

    name: str
    per_agent: tuple[float, ...]
    concurrent: bool
    source: str

    @property
    def seconds(self) -> float:
        if not self.per_agent:
            return 0.0
        return max(self.per_agent) if self.concurrent else sum(self.per_agent)


@dataclass(frozen=True)
class StepEstimate:
    """A step's phases with the agents' own rollout backends (`phases`, which sum to
    `total`), and the rollout and weight sync of either backend (`alternatives`)."""

    gpu: Gpu
    agents: tuple[Agent, ...]
    phases: tuple[Phase, ...]
    alternatives: dict[str, Phase]

    @property
    def total(self) -> float:
        return sum(phase.seconds for phase in self.phases)

    def total_with(self, backend: str) -> float:
        """The step if every agent rolled out with `backend` ("vllm" or "transformers")."""
        if backend not in ROLLOUT_ROWS:
            raise ValueError(f"rollout backend {backend!r}: not one of {sorted(ROLLOUT_ROWS)}")
        rollout = self.alternatives[ROLLOUT_ROWS[backend]].seconds
        sync = self.alternatives[SYNC_ROW].seconds if backend == "vllm" else 0.0
        rest = sum(p.seconds for p in self.phases if p.name not in ("rollout", "weight sync"))
        return rollout + sync + rest

    def meets_target(self, seconds: float | None = None) -> bool:
        return (self.total if seconds is None else seconds) <= TARGET_S


ROLLOUT_ROWS = {"transformers": "rollout, eager transformers", "vllm": "rollout, vLLM (TP=GPUs)"}
SYNC_ROW = "weight sync, with vLLM"
