"""HACPO baseline: every agent learns from every peer's rollouts on every prompt.

Heterogeneous Agent Collaborative Policy Optimization (Zhang et al., arXiv
2603.02604), read from the paper's summary and its authors' code
(github.com/zzx-peter/HACRL-code, recipe/hacpo). For a learner L, the group of a
prompt is the n own responses plus the n responses of every peer. Four mechanisms:

1. Capability-aware advantage (paper Eq.5-6). Capability P_a is agent a's rolling
   success rate (mean of `capability_window` steps, updated with the current step
   first; checkpoints save the window: `state_dict`). A response from source S is
   weighted by omega = 1 / clip(P_S / P_L) in the baseline b = mean_j(omega_j r_j);
   b = plain mean when all rewards of the pooled group are equal (no signal is
   invented) and b = mean of L's own rewards if the weighted baseline exceeds 1
   (binary rewards). Advantage (r - b) / (std + adv_eps) over the pooled group,
   sample std (adv_ddof=1, every entry's default). Own responses get these advantages too
   (`own_advantages`).
2. Capability discrepancy coefficient: a peer response's loss term is scaled by
   clip(P_S / P_L, capability_ratio_min, capability_ratio_max) - its weight here.
3. Exponential importance sampling: the ratio of a peer response is the
   sequence-level exp(mean_t log pi_L(o_t) - mean log pi_S(o)), the learner's
   per-token mean on its own tokenisation against the source's stored mean
   generation log-prob. It is expressed through the shared loss by giving each
   peer token the source's mean as "old" log-prob and using ratio='sequence'.
4. Clipping of peer ratios to a one-sided trust region [1 - 0.2, 1] (preset
   peer_eps_low=0.2, peer_eps_high=0); own responses use GSPO's clip (3e-4, 4e-4).

Deviations, all because the project's one shared surrogate (Eq.10) is kept:
- The paper's peer term is clamp(r)·sg(clamp(r))^alpha·A (alpha = 1 in the
  authors' config); here alpha = 0 and the clip is PPO's min(rA, clip(r)A), so a
  peer ratio outside [0.8, 1] still has a gradient on the side PPO leaves open.
- "Stepwise" clipping raises the lower bound by 0.025 per minibatch in the
  authors' config; the loss here does not know the minibatch index, so the
  bound stays at 0.8. Peer-last ordering (own minibatches first) matches theirs:
  unlike GRAFT, a prompt's own and peer rows are separate minibatch units here
  (`units_by_prompt` is False).
- Aggregation is the project's token mean, not their per-sequence mean.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from algorithms.config import AlgorithmConfig
from algorithms.exchange.base import (
    ExchangeResult,
    ExchangeStrategy,
    register_strategy,
    score_texts,
)
from algorithms.exchange.stats import ExchangeStats
from graft_env.schema import Number, Positive, PositiveNumber, require
from graft_env.types import AgentRollouts, ScoredText, Scorer, TransferredGroup


@dataclass(frozen=True)
class HacpoOptions:
    """HACPO's capability options (merged into AlgorithmConfig)."""

    capability_window: Positive = field(
        default=5,
        metadata={
            "help": "HACPO: steps in the rolling window of each agent's success rate (capability)."
        },
    )
    capability_ratio_min: PositiveNumber = field(
        default=0.1, metadata={"help": "HACPO: lower bound of capability ratios."}
    )
    capability_ratio_max: Number = field(
        default=10.0, metadata={"help": "HACPO: upper bound of capability ratios."}
    )


@register_strategy("hacpo")
class HacpoExchange(ExchangeStrategy):
    """All peer responses on all prompts, capability-weighted, with sequence-level IS."""

    options = HacpoOptions

    def check_options(self, where: str) -> None:
        super().check_options(where)
        low, high = self.config.capability_ratio_min, self.config.capability_ratio_max
        if high < low:
            raise require(where, "capability_ratio_max", high, f">= capability_ratio_min={low}")

    def __init__(self, config: AlgorithmConfig) -> None:
        super().__init__(config)
        self._success_history: dict[str, deque[float]] = {}

    @property
    def replaces_own_groups(self) -> bool:
        return False

    @property
    def units_by_prompt(self) -> bool:
        """False: own groups and peer groups are separate units, so peer-last runs all
        own rows first, as the authors' trainer does (`_target_trajectories_self_first`)."""
        return False

    def state_dict(self) -> dict[str, Any]:
        """The rolling success rates of every agent, oldest first (exact floats in JSON)."""
        return {"success_history": {a: list(rates) for a, rates in self._success_history.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the window `state_dict` saved; anything else is refused."""
        window = self.config.capability_window
        history = state.get("success_history") if set(state) == {"success_history"} else None
        if not isinstance(history, dict):
            raise ValueError(
                f"hacpo state must be {{'success_history': {{agent: rates}}}}, got keys "
                f"{sorted(state)}"
            )
        for agent, rates in history.items():
            if not isinstance(rates, list) or len(rates) > window:
                raise ValueError(
                    f"hacpo state: success_history[{agent!r}] must list at most {window} rates "
                    f"(capability_window), got {rates!r}"
                )
            for i, rate in enumerate(rates):
                if not _is_rate(rate):
                    raise ValueError(
                        f"hacpo state: success_history[{agent!r}][{i}] = {rate!r} is not a "
                        "success rate (a finite number in [0, 1])"
                    )
        self._success_history = {
            agent: deque((float(r) for r in rates), maxlen=window)
            for agent, rates in history.items()
        }

    def capabilities(self) -> dict[str, float]:
        """Rolling success rate of every agent seen so far."""
        return {agent: float(np.mean(rates)) for agent, rates in self._success_history.items()}

    def capability_ratio(self, source: str, learner: str) -> float:
        """clip(P_source / P_learner): how much a source's response counts for the learner."""
        cfg = self.config
        capability = self.capabilities()
        if source == learner:
            return 1.0
        if capability[learner] == 0.0:
            return cfg.capability_ratio_max if capability[source] > 0 else 1.0
        raw = capability[source] / capability[learner]
        return float(np.clip(raw, cfg.capability_ratio_min, cfg.capability_ratio_max))

    def select(
        self,
        rollouts: Mapping[str, AgentRollouts],
        receivers: Sequence[str],
        scorer: Scorer,
        rng: np.random.Generator,
    ) -> ExchangeResult:
        for agent, agent_rollouts in rollouts.items():
            history = self._success_history.setdefault(
                agent, deque(maxlen=self.config.capability_window)
            )
            history.append(float(np.mean(agent_rollouts.rewards > 0)))
        stats = ExchangeStats(strategy=self.name)
        for agent, capability in self.capabilities().items():
            stats.count(f"capability/{agent}", capability)
        transfers = {
            receiver: self._transfer(receiver, rollouts, scorer, stats) for receiver in receivers
        }
        return ExchangeResult(transfers, stats)

    def own_advantages(
        self,
        receiver: str,
        rollouts: Mapping[str, AgentRollouts],
        transfers: Sequence[TransferredGroup],
    ) -> np.ndarray:
        return self._learner_advantages(receiver, rollouts)[receiver]

    def _transfer(
        self,
        receiver: str,
        rollouts: Mapping[str, AgentRollouts],
        scorer: Scorer,
        stats: ExchangeStats,
    ) -> list[TransferredGroup]:
        n = self.config.n
        num_prompts = rollouts[receiver].rewards.shape[0]
        items = [(s, p) for s in rollouts if s != receiver for p in range(num_prompts)]
        texts = [text for s, p in items for text in rollouts[s].texts[p]]
        reasons = [r for s, p in items for r in rollouts[s].finish_reasons[p]]
        prompt_indices = [p for _, p in items for _ in range(n)]
        scored = score_texts(scorer, receiver, prompt_indices, texts, reasons)
        advantages = self._learner_advantages(receiver, rollouts)
        groups = []
        for j, (source, p) in enumerate(items):
            peer = rollouts[source]
            weights = np.full(n, self.capability_ratio(source, receiver))
            behaviour = [
                # The ratio's denominator is the source's mean generation log-prob, spread
                # over the receiver's tokens so that mean_t(new - old) is Eq.(59)'s exponent.
                ScoredText(item.token_ids, np.full(len(item.token_ids), peer.mean_logp(p, i)))
                for i, item in enumerate(scored[j * n : (j + 1) * n])
            ]
            groups.append(
                TransferredGroup(
                    prompt_index=p,
                    source=source,
                    response_indices=np.arange(n),
                    texts=list(peer.texts[p]),
                    advantages=advantages[source][p].copy(),
                    weights=weights,
                    scored=behaviour,
                    clip=self.config.peer_clip,
                )
            )
            direction = stats.direction(source, receiver)
            direction.candidates = num_prompts
            direction.selected_prompts.append(p)
            direction.record(None, weights, 0)
        return groups

    def _learner_advantages(
        self, learner: str, rollouts: Mapping[str, AgentRollouts]
    ) -> dict[str, np.ndarray]:
        """Capability-aware advantages [P, n] of every agent's responses, seen by `learner`."""
        cfg = self.config
        agents = list(rollouts)
        if learner not in self._success_history:
            raise ValueError(f"no capability for {learner!r}: call the strategy before advantages")
        rewards = np.concatenate([rollouts[a].rewards for a in agents], axis=1)
        omega = np.concatenate(
            [np.full(cfg.n, 1 / self.capability_ratio(a, learner)) for a in agents]
        )
        baseline = (rewards * omega).mean(axis=1)
        own_mean = rollouts[learner].rewards.mean(axis=1)
        baseline = np.where(baseline > 1.0, own_mean, baseline)
        uniform = (rewards == rewards[:, :1]).all(axis=1)
        baseline = np.where(uniform, rewards.mean(axis=1), baseline)
        centred = rewards - baseline[:, None]
        if cfg.adv_scale == "std":
            centred = centred / (
                rewards.std(axis=1, ddof=cfg.adv_ddof, keepdims=True) + cfg.adv_eps
            )
        centred[uniform] = 0.0
        return {a: centred[:, i * cfg.n : (i + 1) * cfg.n] for i, a in enumerate(agents)}


def _is_rate(value: object) -> bool:
    """A number in [0, 1]; bools and strings are not (JSON keeps a saved float a float)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and 0.0 <= value <= 1.0
