"""Live GRAFT between TRL trainers: each agent an ordinary `GRPOTrainer` run, any process count.

    trainer = LiveGRPOTrainer(
        model="path/to/model", reward_funcs=math_reward, args=GRPOConfig(...),
        train_dataset=dataset,  # columns prompt, problem (the exchange key) and answer
        agent="qwen", agents=["qwen", "llama"], channel="runs/pair/channel",
    )
    trainer.train()  # under its own `accelerate launch`, beside the other agents' launches

After TRL has sampled, rewarded and normalised a generation batch, the agents meet in
`channel` (`algorithms.library.channel`): rank 0 of each agent publishes the step's groups
of the whole batch (every process's), then every process waits for each peer's record of
the step, which must hold the same prompts in the same order. Every agent then computes the
same exchange over all agents' groups with this project's `graft` algorithm (the gate,
balancing with ties, N > 2 agents as GRAFT-SPEC §8 orders them: `agents`' order) and takes
its own part as receiver: the groups that move to it, scored by its model (every process
scores, `ExchangeGRPOTrainer._logps_everywhere`), weighted with the compatibility weights
and floor from the source's sampler log-probs, carrying the source's own group advantages,
spliced into its batch peer-last as graft-library's are (`trl_adapter`, the same code path).

The sampler's log-probs are vLLM's where TRL keeps them, else TRL's pi_old scoring of the
sampled tokens (transformers' generate samples from the model itself); TRL keeps neither
when a generation batch is one optimiser step (steps_per_generation x num_iterations divides
gradient_accumulation_steps) without vLLM, which is refused. An exchange option that draws
from the step's random generator (random prompts, random admission, random order) would
draw differently here than in a run computing every receiver at once, so it is refused.

A step record stays in the channel: an agent resumed from a checkpoint reads its peers'
records of the step again. A missing peer stops the waiting agents after `timeout` seconds
with one line naming it, before anything of the step is applied.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from algorithms.core.rollout_correction import MAX_LOGPROB_GAP
from algorithms.library.channel import Channel, StepRecord
from algorithms.library.trl_adapter import EXCHANGE_OPTIONS, ExchangeGRPOTrainer, check_trl_version
from graft_env.types import AgentRollouts

log = logging.getLogger(__name__)

LIVE_OPTIONS = (*EXCHANGE_OPTIONS, "balance")
"""The `graft` options a live TRL agent takes; its loss options are GRPOConfig's (TRL clips
peer rows as its own: the default peer_clip=True)."""
RANDOM_DRAWS = {"selection": "random_prompts", "admission": "random", "order": "random"}


class LiveGRPOTrainer(ExchangeGRPOTrainer):
    """TRL's GRPOTrainer as agent `agent` of a live GRAFT exchange between `agents`.

    channel: the rendezvous folder shared by all agents (a shared filesystem across nodes);
    timeout: seconds to wait for a peer's step record; graft_options: `graft` exchange
    options (delta, balance, candidates, ...), the same for every agent; problem_column /
    answer_column: the train dataset's problem text (the exchange key) and gold answer;
    max_logprob_gap: the largest mean |sampler - trainer| log-prob per own token, in nats,
    before training stops (None: never; `trl_adapter`)."""

    algorithm_name = "graft"
    exchange_options = LIVE_OPTIONS
    metric_prefix = "exchange"

    def __init__(
        self,
        *args: Any,
        agent: str,
        agents: Sequence[str],
        channel: str,
        timeout: float = 600.0,
        graft_options: Mapping[str, Any] | None = None,
        problem_column: str = "problem",
        answer_column: str = "answer",
        max_logprob_gap: float | None = MAX_LOGPROB_GAP,
        **kwargs: Any,
    ) -> None:
        check_trl_version("LiveGRPOTrainer")
        options = dict(graft_options or {})
        drawn = [f"{k}={v!r}" for k, v in RANDOM_DRAWS.items() if options.get(k) == v]
        if drawn:
            raise ValueError(
                f"LiveGRPOTrainer: graft_options {drawn} draw from the step's random generator, "
                "which each live agent would draw on its own: not supported"
            )
        self.channel = Channel(channel, agents, timeout)
        if agent not in self.channel.agents:
            raise ValueError(f"LiveGRPOTrainer: agent {agent!r} is not one of agents {agents}")
        self.agent = agent
        super().__init__(*args, **kwargs)
        args_ = self.args
        generate_every = args_.steps_per_generation * self.num_iterations
        if not self.use_vllm and args_.gradient_accumulation_steps % generate_every == 0:
            raise ValueError(
                "LiveGRPOTrainer: TRL keeps no sampler log-probs when a generation batch is "
                f"one optimiser step (steps_per_generation={args_.steps_per_generation} x "
                f"num_iterations={self.num_iterations} divides gradient_accumulation_steps="
                f"{args_.gradient_accumulation_steps}), and the compatibility weights need them:"
                " use steps_per_generation >= 2 (the exchange's minibatch count) or vLLM"
            )
        self._setup_exchange(options, problem_column, answer_column, max_logprob_gap)

    def _peers(
        self, receiver: AgentRollouts, step: int
    ) -> tuple[dict[str, AgentRollouts], dict[str, float]]:
        """Publish this agent's step (rank 0), then read every peer's record of it."""
        if self.accelerator.is_main_process:
            self.channel.publish(StepRecord(self.agent, step, receiver))
        records = self.channel.wait(step, self.agent, receiver.prompt_ids)
        peers = {name: records[name].rollouts for name in records}
        if self.accelerator.is_main_process:
            log.info(
                "live exchange: step %d: %s met %s (%d prompts)",
                step,
                self.agent,
                ", ".join(peers),
                len(receiver.prompt_ids),
            )
        return {
            name: receiver if name == self.agent else peers[name] for name in self.channel.agents
        }, {}
