"""Seconds per generation batch of a TRL-hosted live GRAFT agent against plain TRL GRPO.

    OMP_WAIT_POLICY=PASSIVE python -m benchmarks.perf.trl_graft_step --rounds 5 --threads 1

Both sides are TRL 1.16 `GRPOTrainer` runs of tiny-a on the same 8 procedural problems, in
dataset order, with the same settings (Eq.10's: bnpo, 2 optimiser steps per generation
batch, beta 0; real sampling, up to --tokens tokens): plain `GRPOTrainer`, and
`LiveGRPOTrainer` as tiny-a of the pair tiny-a / tiny-b. The peer's step records are in
the channel before the run (tiny-b's responses: two correct on one problem, the rest
wrong, scored by tiny-b), so the GRAFT side never waits: what it adds is the gather, the
channel's write and read, the exchange, scoring the moved peer group and the splice.
Rounds alternate which side runs first; each side's step time is the median over its
timed generation batches (the first is warm-up). Prints each round's seconds and ratio,
then the median ratio and its range over rounds.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path

import torch

import benchmarks  # noqa: F401  (the OpenMP defaults)
from benchmarks.perf.common import add_threads_option

N, CHUNKS, PROMPTS, SEED = 4, 2, 8, 0
AGENTS = ("tiny-a", "tiny-b")


def problems() -> list:
    from graft_env.envs import MultiAgentMathEnv

    env = MultiAgentMathEnv(
        agents=["tiny-a"], dataset="procedural", split="train",
        dataset_options={"size": 4, "difficulty": 1}, batch_size=PROMPTS, n=N,
    )  # fmt: skip
    return env.problems[:PROMPTS]


def peer_rollouts():
    """tiny-b's step: its responses to the 8 problems in dataset order (two correct on
    problem 1), their log-probs under tiny-b, and advantages."""
    import algorithms
    from algorithms.library.format import prompt_key
    from graft_env.policies import load_policy
    from graft_env.rewards import verify_batch
    from graft_env.types import AgentRollouts

    policy, chosen = load_policy("tiny-b"), problems()
    texts = [
        [f"so \\boxed{{{p.answer}}}", "\\boxed{0}", f"\\boxed{{{p.answer}}}", "no"]
        if j == 1
        else ["\\boxed{0}", "\\boxed{1}", "no", "\\boxed{-7}"]
        for j, p in enumerate(chosen)
    ]
    prompts = [policy.format_prompt(p.problem) for p in chosen]
    ids = [[policy.encode_response(t, "stop") for t in group] for group in texts]
    rewards = [
        [v.reward for v in verify_batch(group, [p.answer] * N)]
        for group, p in zip(texts, chosen, strict=True)
    ]
    rollouts = AgentRollouts(
        "tiny-b", [prompt_key(p.problem) for p in chosen], [p.problem for p in chosen], texts,
        ids, [policy.score_tokens([q] * N, g) for q, g in zip(prompts, ids, strict=True)],
        [["stop"] * N for _ in chosen], rewards,
    )  # fmt: skip
    algorithms.make("graft", n=N, adv_eps=1e-4, adv_ddof=1).compute_advantages({"tiny-b": rollouts})
    return rollouts


def publish_peer(channel: Path, rollouts, steps: int) -> None:
    """`rollouts` as tiny-b's record of every generation batch of a run."""
    from algorithms.library.channel import Channel, StepRecord

    target = Channel(channel, AGENTS, timeout=1)
    for step in range(0, CHUNKS * steps, CHUNKS):
        target.publish(StepRecord("tiny-b", step, rollouts))


def run_side(side: str, root: Path, steps: int, tokens: int) -> list[float]:
    """One run of `steps` generation batches; seconds of each batch after the first."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from algorithms.library.trl_adapter import math_reward
    from algorithms.library.trl_live import LiveGRPOTrainer
    from graft_env.policies import load_policy

    policy = load_policy("tiny-a")
    rows = [
        {"prompt": policy.format_prompt(p.problem), "problem": p.problem, "answer": p.answer}
        for p in problems()
    ]
    args = GRPOConfig(
        output_dir=str(root / side), num_generations=N,
        per_device_train_batch_size=PROMPTS * N // CHUNKS, steps_per_generation=CHUNKS,
        gradient_accumulation_steps=1, max_completion_length=tokens, temperature=1.0,
        beta=0.0, loss_type="bnpo", epsilon_high=0.28, learning_rate=1e-4, use_cpu=True,
        bf16=False, report_to="none", save_strategy="no", disable_tqdm=True,
        logging_steps=1000, max_steps=CHUNKS * steps, seed=SEED, shuffle_dataset=False,
    )  # fmt: skip
    marks: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % CHUNKS == 0:
                marks.append(time.perf_counter())

        def on_train_begin(self, args, state, control, **kwargs):
            marks.append(time.perf_counter())

    common = {
        "model": AutoModelForCausalLM.from_pretrained(policy.path, dtype=torch.float32),
        "reward_funcs": math_reward,
        "args": args,
        "train_dataset": Dataset.from_list(rows),
        "processing_class": AutoTokenizer.from_pretrained(policy.path),
        "callbacks": [Clock()],
    }
    if side == "graft":
        trainer = LiveGRPOTrainer(
            **common, agent="tiny-a", agents=list(AGENTS), channel=str(root / "channel"),
            timeout=5,
        )  # fmt: skip
    else:
        trainer = GRPOTrainer(**common)
    trainer.train()
    return [b - a for a, b in itertools.pairwise(marks[1:])]  # the first is warm-up


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    parser.add_argument("--steps", type=int, default=4, help="generation batches per run")
    parser.add_argument("--tokens", type=int, default=32, help="max completion tokens")
    add_threads_option(parser)
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        peer = peer_rollouts()
        for number in range(options.rounds):
            root = Path(folder) / f"round{number}"
            publish_peer(root / "channel", peer, options.steps)
            order = ("plain", "graft") if number % 2 == 0 else ("graft", "plain")
            seconds = {}
            for side in order:
                timed = run_side(side, root, options.steps, options.tokens)
                seconds[side] = statistics.median(timed)
            ratios.append(seconds["graft"] / seconds["plain"])
            print(
                f"round {number} ({order[0]} first): plain {seconds['plain']:.3f} s, "
                f"graft {seconds['graft']:.3f} s per generation batch, ratio {ratios[-1]:.3f}",
                flush=True,
            )
    print(
        f"GRAFT / plain TRL step: median {statistics.median(ratios):.3f} "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}, {options.rounds} rounds, "
        f"{options.threads} threads)"
    )


if __name__ == "__main__":
    main()
