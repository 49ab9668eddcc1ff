"""Worker-group runs of the tiny pair on a local CPU Ray cluster, shared by the worker-group
tests (test_worker_group.py, test_worker_group_correction.py): the config, a run to its end,
and what 1 and 2 ranks per agent must agree on."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from run_configs import small_config

from algorithms.training.run_config import AgentSpec, TrainConfig
from graft_env.types import TrainBatch, TrainSequence

if TYPE_CHECKING:
    from algorithms.training.step import StepRecord
    from graft_env.policies import Policy

# every metric but timings and padding_share (1 and 2 ranks run different forwards)
UNCOMPARED = ("time/", "padding_share")

# the 2-rank runs form micro-batches by token budget and compute log-probs 64 positions at
# a time (rows are ~90 prompt + <= 64 response tokens); the 1-rank run by rows, in one pass
TWO_RANK_OPTIONS = {"max_tokens_per_micro_batch": 400, "logits_chunk_tokens": 64}


def group_config(
    run_dir: Path,
    paths: Mapping[str, Path],
    ranks: int,
    steps: int,
    agent_options: Mapping[str, Any] | None = None,
    algorithm_options: Mapping[str, Any] | None = None,
    **extra: Any,
) -> TrainConfig:
    """GRAFT on the tiny pair (`paths`: each member's folder), `ranks` ranks per agent;
    `agent_options` go to every agent, `algorithm_options` (small_config's `options`) and
    `extra` (e.g. `rollout_correction`) to `small_config`."""
    config = small_config(
        run_dir,
        "graft",
        backend="ray",
        steps=steps,
        ray={
            "num_cpus": 4,
            "num_cpus_per_agent": ranks,
            "torch_threads": 1,
            "ranks_per_agent": ranks,
            "placement_timeout_s": 60,
        },
        options=dict(algorithm_options or {}),
        **extra,
    )
    options = {"lr": 1e-3, "generation_batch_size": 8, **(agent_options or {})}
    agents = tuple(AgentSpec(a.name, str(paths[a.name]), options) for a in config.agents)
    return dataclasses.replace(config, agents=agents)


def probe_batch(agent: str) -> TrainBatch:
    """A fixed minibatch of 10 rows over 3 prompts, responses of 3-40 tokens."""
    rng = np.random.default_rng(7)
    prompts = ["What is 2 + 3?", "What is 17 - 9?", "Compute 6 * 7."]
    lengths = rng.integers(3, 41, 10)
    sequences = [
        TrainSequence(
            prompt_index=j % 3,
            response_token_ids=rng.integers(5, 60, int(length)).tolist(),
            old_logprobs=np.full(int(length), -3.0, dtype=np.float32),
            advantage=float(rng.choice([-1.0, 1.0])),
        )
        for j, length in enumerate(lengths)
    ]
    return TrainBatch(agent, prompts, sequences, [list(range(10))])


@dataclasses.dataclass
class Run:
    rows: list[dict]  # the metrics rows
    weights: dict[str, dict[str, np.ndarray]]  # each agent's full weights at the end
    placement: dict[str, list[dict]]  # each agent's ranks' `setup` reports
    gradients: dict[str, tuple[float, dict[str, np.ndarray]]]  # `probe`'s, by agent
    ran: list[int]  # the steps this Trainer ran (a resumed one: those after its checkpoint)
    records: list[StepRecord] = dataclasses.field(default_factory=list)  # their StepRecords


def train(
    config: TrainConfig, probe: bool = False, wrap: Callable[[str, Policy], Policy] | None = None
) -> Run:
    """Train `config` to its end; with `probe`, first the gradients of `probe_batch` at
    the initial weights (no step taken); `wrap(agent, policy)` stands in for each group policy."""
    from algorithms.training.loop import Trainer, make_policies

    policies: Mapping | None = None
    if wrap is not None:
        policies = {name: wrap(name, policy) for name, policy in make_policies(config).items()}
    trainer = Trainer(config, policies=policies)
    policies = trainer.policies
    gradients = {n: p.gradients(probe_batch(n)) for n, p in policies.items()} if probe else {}
    records = []
    rows = trainer.train(on_step=records.append)
    run = Run(
        rows,
        {name: p.state_dict() for name, p in policies.items()},
        {name: p.placement for name, p in policies.items()},
        gradients,
        [record.step for record in records],
        records,
    )
    for policy in policies.values():
        policy.group.shutdown()
    return run


def comparable(rows: list[dict]) -> list[dict]:
    """`rows` without the metrics 1 and 2 ranks need not share (`UNCOMPARED`)."""
    return [{k: v for k, v in r.items() if not k.startswith(UNCOMPARED)} for r in rows]


def assert_weights_within_adam_noise(
    one: dict[str, dict[str, np.ndarray]], two: dict[str, dict[str, np.ndarray]]
) -> None:
    """Adam divides by sqrt(v): where a gradient is ~0, float-order noise moves a weight by
    up to lr per step, so single elements may differ by about as much as training moved
    them. The claim is the per-tensor median (<= 1e-5); the max bound (3 steps of lr 1e-3,
    for each of the two runs) is only a sanity check: about the most two Adam runs of 3
    steps can part by anyway (docs/scale-out.md quotes the measured worst, 6.5e-4)."""
    for agent, weights in one.items():
        assert sorted(two[agent]) == sorted(weights)
        worst = max(float(np.abs(two[agent][k] - v).max()) for k, v in weights.items())
        print(f"{agent}: weights max |diff| {worst:.2e}")
        for key, value in weights.items():
            difference = np.abs(two[agent][key] - value)
            assert np.median(difference) <= 1e-5, (agent, key)
            assert difference.max() <= 3 * 2 * 1e-3, (agent, key)
