"""Two live TRL agents on the tiny pair whose generation is fixed (a module of its own, also
run as each agent's script under `accelerate launch` by the end-to-end test).

The batch is 8 problems x N = 4 responses. tiny-a's fixed texts solve problem 0 twice and
tiny-b's problem 1 twice; every other response is wrong. So each step Eq.4 moves problem 0
from tiny-a to tiny-b and problem 1 from tiny-b to tiny-a (balanced, one each), and with two
processes per agent exactly one of each receiver's processes holds its peer group: the
other scores padding rows. Fixed texts make every verdict independent of sampling (and so of
the CPU); what the model computes (scores, weights) is compared, never pinned.

    accelerate launch --multi_gpu --num_processes 2 live_pair.py AGENT CHANNEL OUT STEPS
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
from pathlib import Path

import torch
from datasets import Dataset
from library_runs import ENV
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig

from algorithms.core.rollout_correction import MAX_LOGPROB_GAP
from algorithms.library.importers import ImportSpec, import_rollouts
from algorithms.library.trl_adapter import GraftGRPOTrainer, math_reward
from algorithms.library.trl_live import LiveGRPOTrainer
from graft_env.envs import MultiAgentMathEnv
from graft_env.policies import load_policy

AGENTS = ["tiny-a", "tiny-b"]
THREE = [*AGENTS, "tiny-a2"]  # GRAFT-SPEC §8's N > 2 exchange: a second tiny-a
MODELS = {"tiny-a": "tiny-a", "tiny-b": "tiny-b", "tiny-a2": "tiny-a"}
N, CHUNKS, PROMPTS, SEED = 4, 2, 8, 0
SOLVES = {"tiny-a": 0, "tiny-b": 1, "tiny-a2": 2}  # the problem each agent solves twice
CHECKPOINTING = next(
    name
    for name in ("activation_checkpointing", "gradient_checkpointing")
    if name in inspect.signature(GRPOConfig).parameters
)


def problems() -> list:
    """The pair's 8 problems (the library tests' small procedural set)."""
    env = MultiAgentMathEnv(
        agents=["tiny-a"],
        dataset=ENV["dataset"],
        split=ENV["split"],
        dataset_options=ENV["dataset_options"],
        batch_size=PROMPTS,
        n=N,
    )
    return env.problems[:PROMPTS]


def fixed_texts(agent: str, index: int, answer: str) -> list[str]:
    """Agent `agent`'s 4 responses to problem `index`: two correct on its solved problem."""
    if index == SOLVES[agent]:
        good = f"\\boxed{{{answer}}}"
        return [f"The sum is {good}.", "\\boxed{0}", f"so {good}", "no idea"]
    return ["\\boxed{0}", "I think \\boxed{1}", "no idea", "\\boxed{-7}"]


def dataset_rows(agent: str) -> list[dict]:
    policy = load_policy(MODELS[agent])
    return [
        {"prompt": policy.format_prompt(p.problem), "problem": p.problem, "answer": p.answer}
        for p in problems()
    ]


def config(out: Path, processes: int, steps: int, **extra) -> GRPOConfig:
    """Eq.10's TRL settings (bnpo, one micro-batch per optimiser step, beta 0, the native
    clip radii), one generation batch of the 8 problems per exchange step."""
    options = {
        "output_dir": str(out),
        "num_generations": N,
        "per_device_train_batch_size": PROMPTS * N // CHUNKS // processes,
        "steps_per_generation": CHUNKS,
        "gradient_accumulation_steps": 1,
        "max_completion_length": 64,
        "temperature": 1.0,  # the tiny pair's log-prob temperature
        "beta": 0.0,
        "loss_type": "bnpo",
        "epsilon": 0.2,
        "epsilon_high": 0.28,  # the project's eps_low / eps_high
        "learning_rate": 1e-3,
        "use_cpu": True,
        "bf16": False,
        CHECKPOINTING: False,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "logging_steps": 1,
        "max_steps": CHUNKS * steps,
        "seed": SEED,
        **extra,
    }
    return GRPOConfig(**options)


class Counting:
    """A trainer (mixed in before `LiveGRPOTrainer` or `GraftGRPOTrainer`) whose generation
    returns `fixed_texts` and that records, per scoring call, the rows it scored and the
    forward passes its model ran for them."""

    def __init__(self, *args, by_prompt: dict, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.by_prompt, self.forwards, self.scoring = by_prompt, 0, []

        def count(*_):
            self.forwards += 1

        self.model.register_forward_pre_hook(count)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations):
        return [self.by_prompt[tuple(ids)][r % N] for r, ids in enumerate(prompt_ids)], None

    def _logps(self, reference, batch, rows, completions):
        before = self.forwards
        logps = super()._logps(reference, batch, rows, completions)
        own = sum(1 for ids in completions if ids != [self._tokenizer.eos_token_id])
        self.scoring.append(
            {"step": self.state.global_step, "rows": len(rows), "own_rows": own,
             "forwards": self.forwards - before}
        )  # fmt: skip
        return logps


class LiveCounting(Counting, LiveGRPOTrainer):
    """A live agent of the pair with fixed texts."""


class LibraryCounting(Counting, GraftGRPOTrainer):
    """tiny-a with fixed texts, replaying a library."""


def by_prompt(agent: str) -> dict[tuple[int, ...], list[list[int]]]:
    """The agent's fixed responses as token ids, by prompt token ids."""
    policy = load_policy(MODELS[agent])
    return {
        tuple(policy.encode_prompt(policy.format_prompt(p.problem))): [
            policy.encode_response(t, "stop") for t in fixed_texts(agent, j, p.answer)
        ]
        for j, p in enumerate(problems())
    }


def import_library(out: Path) -> Path:
    """A library of tiny-b's fixed groups of the 8 problems, scored by tiny-b: its group of
    problem 1 (two correct) is the one Eq.4 can take where tiny-a fails it."""
    source = out.with_suffix(".jsonl")
    rows = [
        {"prompt": p.problem, "response": text, "finish_reason": "stop"}
        for j, p in enumerate(problems())
        for text in fixed_texts("tiny-b", j, p.answer)
    ]
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = ImportSpec(
        path=str(source), model="tiny-b", dataset=ENV["dataset"], split=ENV["split"],
        dataset_options=ENV["dataset_options"], score_with="tiny-b",
    )  # fmt: skip
    import_rollouts(spec, out)
    return out


def library_trainer(
    library: Path,
    out: Path,
    processes: int,
    steps: int,
    max_logprob_gap: float | None = MAX_LOGPROB_GAP,
    **extra,
):
    policy = load_policy("tiny-a")
    return LibraryCounting(
        model=AutoModelForCausalLM.from_pretrained(policy.path, dtype=torch.float32),
        reward_funcs=math_reward,
        args=config(out, processes, steps, **extra),
        train_dataset=Dataset.from_list(dataset_rows("tiny-a")),
        processing_class=AutoTokenizer.from_pretrained(policy.path),
        library=str(library),
        graft_options={"delta": 0.0},
        max_logprob_gap=max_logprob_gap,
        by_prompt=by_prompt("tiny-a"),
    )


def live_trainer(
    agent: str,
    channel: Path,
    out: Path,
    processes: int,
    steps: int,
    timeout: float,
    graft_options: dict | None = None,
    agents: list[str] = AGENTS,
    **extra,
) -> LiveCounting:
    policy = load_policy(MODELS[agent])
    return LiveCounting(
        model=AutoModelForCausalLM.from_pretrained(policy.path, dtype=torch.float32),
        reward_funcs=math_reward,
        args=config(out, processes, steps, **extra),
        train_dataset=Dataset.from_list(dataset_rows(agent)),
        processing_class=AutoTokenizer.from_pretrained(policy.path),
        agent=agent,
        agents=agents,
        channel=str(channel),
        timeout=timeout,
        graft_options=graft_options,
        by_prompt=by_prompt(agent),
    )


def main() -> None:
    """One agent of the end-to-end pair: train STEPS exchange steps (checkpoint after
    each, resuming from the last one there is), then write its scoring counts per rank.
    GRAFT_TEST_STOP_AT=s ends every process of the agent at step s, before it publishes.
    AGENT "library" is tiny-a replaying the library CHANNEL instead."""
    agent, channel, out, steps = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    saving = {"save_strategy": "steps", "save_steps": CHUNKS}
    if agent == "library":
        trainer = library_trainer(channel, out, processes, steps, **saving)
    else:
        timeout = float(os.environ["GRAFT_TEST_TIMEOUT"])
        trainer = live_trainer(agent, channel, out, processes, steps, timeout, **saving)
    stop_at = os.environ.get("GRAFT_TEST_STOP_AT")
    if stop_at is not None:
        peers = trainer._peers

        def stopping(receiver, step):
            if step == int(stop_at):
                os._exit(3)  # killed: no clean-up, no record of the step
            return peers(receiver, step)

        trainer._peers = stopping
    resume = any(out.glob("checkpoint-*"))
    trainer.train(resume_from_checkpoint=True if resume else None)
    rank = trainer.accelerator.process_index
    (out / f"scoring-{rank}.json").write_text(json.dumps(trainer.scoring))


if __name__ == "__main__":
    main()
