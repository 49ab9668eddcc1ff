"""graft-library inside TRL's GRPOTrainer (`algorithms.library.trl_adapter`): on fixed rollouts
of tiny-a and a library of tiny-a and tiny-b runs, the batch the adapter hands TRL's loss is
the one this project's own exchange and `build_batches` build; one real TRL training run
trains on it: own groups first, peer groups last."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("trl")

import torch
from datasets import Dataset
from library_runs import ENV, run_config
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig

import algorithms
from algorithms.library import build_library
from algorithms.library.source import LibrarySource
from algorithms.library.trl_adapter import GraftGRPOTrainer, math_reward
from algorithms.rollouts import step_rng
from algorithms.training.loop import Trainer
from graft_env.envs import MultiAgentMathEnv
from graft_env.policies import load_policy
from graft_env.types import AgentRollouts

N, CHUNKS, SEED = 4, 2, 0
# Peer prompts first, so that peer-last visibly reorders them. The library (tiny-a seeds 1, 2
# and tiny-b seed 3, 3 GRPO steps each) holds an informative group for multiplication/0/3
# (two tiny-a groups: the choice rule picks one), gcd/0/2 (tiny-b's, another tokenizer) and
# linear_equation/0/2; for subtraction/0/0 and modular/0/1 only groups Eq.4 cannot take (k = 0
# or k = n); the receiver solves addition/0/2 itself.
BATCH = (
    "multiplication/0/3", "addition/0/2", "gcd/0/2", "subtraction/0/0", "linear_equation/0/2",
    "modular/0/1",
)  # fmt: skip
SOLVED = "addition/0/2"

warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*", category=FutureWarning)


@pytest.fixture(scope="module")
def library(peer_runs, tmp_path_factory):
    root = tmp_path_factory.mktemp("trl")
    tiny_b = root / "tiny-b-seed3"
    Trainer(run_config(tiny_b, "grpo", "tiny-b", 3, steps=3)).train()
    build_library([*peer_runs, tiny_b], root / "lib")
    return str(root / "lib")


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny-a")


@pytest.fixture(scope="module")
def env(policy):
    return MultiAgentMathEnv(
        agents=["tiny-a"],
        dataset=ENV["dataset"],
        split=ENV["split"],
        dataset_options=ENV["dataset_options"],
        batch_size=len(BATCH),
        n=N,
        formatters={"tiny-a": policy.format_prompt},
    )


def batch_indices(env) -> list[int]:
    ids = [problem.id for problem in env.problems]
    return [ids.index(f"{ENV['dataset']}/{ENV['split']}/{name}") for name in BATCH]


def fixed_texts(problem) -> list[str]:
    """The receiver's fixed responses: two correct ones for SOLVED, all wrong elsewhere."""
    if problem.id.endswith(SOLVED):
        good = f"\\boxed{{{problem.answer}}}"
        return [f"The sum is {good}.", "\\boxed{0}", f"so {good}", "no idea"]
    return ["\\boxed{0}", "I think \\boxed{1}", "no idea", "\\boxed{-7}"]


def project_batch(library, policy, env, delta):
    """What this project's loop builds for these rollouts: the library lookup, graft-library's
    exchange (the receiver's HFPolicy scores the peer texts) and `build_batches`, with TRL's
    eps (1e-4) and its micro-batch count, on the loop's step rng."""
    indices = batch_indices(env)
    problems = [env.problems[i] for i in indices]
    prompts = [policy.format_prompt(p.problem) for p in problems]
    texts = [fixed_texts(p) for p in problems]
    token_ids = [[policy.encode_response(t, "stop") for t in group] for group in texts]
    logprobs = [
        policy.score_tokens([p] * N, ids) for p, ids in zip(prompts, token_ids, strict=True)
    ]
    rewards, _ = env.score_groups(indices, {"tiny-a": texts})
    own = AgentRollouts(
        "tiny-a", [p.id for p in problems], prompts, texts, token_ids, logprobs,
        [["stop"] * N for _ in problems], rewards["tiny-a"],
    )  # fmt: skip
    algorithm = algorithms.make(
        "graft-library", n=N, num_minibatches=CHUNKS, adv_eps=1e-4, delta=delta
    )
    source = LibrarySource(
        library, "most_recent", None, [p.problem for p in env.problems], algorithm.config
    )
    lookup = source.lookup(own, indices, env.score_groups)
    rollouts = {"tiny-a": own, lookup.rollouts.agent: lookup.rollouts}
    algorithm.compute_advantages(rollouts)

    def scorer(receiver, prompt_indices, peer_texts, reasons):
        return policy.score([prompts[p] for p in prompt_indices], list(peer_texts), list(reasons))

    rng = step_rng(SEED, 0)
    transfers = algorithm.exchange(rollouts, ["tiny-a"], scorer, rng).transfers
    batches, counts = algorithm.build_batches(rollouts, transfers, ["tiny-a"], rng)
    return batches["tiny-a"], lookup, counts["tiny-a"]


def trl_config(tmp_path, **extra) -> GRPOConfig:
    options = {
        "output_dir": str(tmp_path / "trl"),
        "num_generations": N,
        "per_device_train_batch_size": len(BATCH) * N // CHUNKS,
        "steps_per_generation": CHUNKS,
        "gradient_accumulation_steps": 1,
        "max_completion_length": 64,
        "temperature": 1.0,  # the tiny pair's log-prob temperature
        "beta": 0.0,
        "loss_type": "bnpo",  # Eq.10: token mean per optimiser step
        "learning_rate": 1e-3,
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "logging_steps": 1,
        "max_steps": CHUNKS,
        "seed": SEED,
        **extra,
    }
    return GRPOConfig(**options)


def fixed_trainer(tmp_path, policy, env, library, rows=None, reward=math_reward, **options):
    """A GraftGRPOTrainer on tiny-a whose generation returns `fixed_texts` of each prompt."""
    by_prompt = {
        tuple(policy.encode_prompt(policy.format_prompt(p.problem))): [
            policy.encode_response(t, "stop") for t in fixed_texts(p)
        ]
        for p in env.problems
    }

    class Fixed(GraftGRPOTrainer):
        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations):
            return [by_prompt[tuple(ids)][r % N] for r, ids in enumerate(prompt_ids)], None

    if rows is None:
        rows = dataset_rows(policy, env.problems)
    tokenizer = AutoTokenizer.from_pretrained(policy.path)
    model = AutoModelForCausalLM.from_pretrained(policy.path, dtype=torch.float32)
    graft_options = options.pop("graft_options", {})
    choose = options.pop("choose", "most_recent")
    return Fixed(
        model=model,
        reward_funcs=reward,
        args=trl_config(tmp_path, **options),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        library=library,
        choose=choose,
        graft_options=graft_options,
    )


def dataset_rows(policy, problems) -> list[dict]:
    return [
        {"prompt": policy.format_prompt(p.problem), "problem": p.problem, "answer": p.answer}
        for p in problems
    ]


@pytest.mark.parametrize("delta", [0.52, 0.8])
def test_the_batch_trl_trains_on_is_the_projects(tmp_path, library, policy, env, delta):
    """delta 0.52 keeps 3 of tiny-b's 4 responses (s = 0.51-0.54) with w = s < 1; the
    default 0.8 removes them all. Every retained row of every micro-batch, in order, is the
    project's: exact token ids and prompt, advantage x weight to 1e-6, old log-probs."""
    expected, lookup, stats = project_batch(library, policy, env, delta)
    assert stats["replaced_groups"] == 3
    assert (stats["removed_peer_responses"], stats["fully_removed_groups"]) == (
        (1, 0) if delta == 0.52 else (4, 1)
    )

    trainer = fixed_trainer(tmp_path, policy, env, library, graft_options={"delta": delta})
    trainer.model.train()
    rows = dataset_rows(policy, [env.problems[i] for i in batch_indices(env)])
    trainer._prepare_inputs([row for row in rows for _ in range(N)])
    chunks = trainer._buffered_inputs
    assert len(chunks) == len(expected.minibatches) == CHUNKS

    removed = 0
    for chunk, minibatch in zip(chunks, expected.minibatches, strict=True):
        kept = chunk["completion_mask"].sum(dim=1) > 0
        removed += int((~kept).sum())
        assert bool((chunk["graft_peer"] | kept).all())  # only peer rows are ever masked
        assert torch.equal(chunk["graft_weight"][~kept], torch.zeros(int((~kept).sum())))
        assert int(kept.sum()) == len(minibatch)
        for row, j in zip(kept.nonzero().flatten().tolist(), minibatch, strict=True):
            seq = expected.sequences[j]
            mask = chunk["completion_mask"][row].bool()
            assert chunk["completion_ids"][row][mask].tolist() == seq.response_token_ids
            prompt = chunk["prompt_ids"][row][chunk["prompt_mask"][row].bool()].tolist()
            assert prompt == policy.encode_prompt(expected.prompts[seq.prompt_index])
            assert bool(chunk["graft_peer"][row]) == seq.is_peer
            assert float(chunk["graft_weight"][row]) == pytest.approx(seq.weight, abs=1e-6)
            advantage = float(chunk["advantages"][row])
            assert advantage == pytest.approx(seq.advantage * seq.weight, abs=1e-6)
            old = chunk["old_per_token_logps"][row][mask].double().numpy()
            np.testing.assert_allclose(old, seq.old_logprobs, atol=1e-5)
    assert removed == stats["removed_peer_responses"]
    # peer-last: the own groups (fully removed ones included) fill the first micro-batch
    assert not chunks[0]["graft_peer"].any() and chunks[1]["graft_peer"].all()

    metrics = trainer._metrics["train"]
    for name, value in lookup.counts.items():
        assert metrics[name] == [value]
    assert metrics["library/used_groups"] == [3.0]
    assert metrics["library/removed_peer_responses"] == [float(removed)]
    assert metrics["library/peer_sequences"] == [float(stats["peer_sequences"])]


def test_one_trl_training_run_trains_own_groups_then_peer_groups(tmp_path, library, policy, env):
    """`trainer.train()` on the 6 batch problems: TRL samples (fixed texts), rewards, and takes
    its 2 optimiser steps on the adapter's micro-batches, own first, the 3 rescued groups last."""
    problems = [env.problems[i] for i in batch_indices(env)]
    trainer = fixed_trainer(
        tmp_path, policy, env, library, rows=dataset_rows(policy, problems),
        graft_options={"delta": 0.52},
    )  # fmt: skip
    seen = []
    compute_loss = trainer.compute_loss

    def recording(model, inputs, *args, **kwargs):
        seen.append(inputs["graft_peer"].tolist())
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = recording
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert seen == [[False] * 12, [True] * 12]
    changed = any(
        not torch.equal(a, p.detach())
        for a, p in zip(before, trainer.model.parameters(), strict=True)
    )
    assert changed
    logged = [row for row in trainer.state.log_history if "library/used_groups" in row]
    assert logged and logged[0]["library/used_groups"] == 3.0
    assert logged[0]["library/rescued_prompts"] == 3.0


def half_reward(completions, **_):
    return [0.5] * len(completions)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"scale_rewards": "batch"}, "scale_rewards='batch'"),
        ({"per_device_train_batch_size": 6}, "multiple of num_generations=4"),
        ({"graft_options": {"eps_low": 0.1}}, "are not exchange options"),
        ({"reward": half_reward}, "needs binary rewards"),
        ({"choose": "model"}, "must be set exactly for 'model'"),
    ],
)
def test_settings_the_update_cannot_honour_are_refused(
    tmp_path, policy, env, library, options, error
):
    problems = [env.problems[i] for i in batch_indices(env)]
    with pytest.raises(ValueError, match=error):
        trainer = fixed_trainer(
            tmp_path, policy, env, library, rows=dataset_rows(policy, problems), **options
        )
        trainer.train()


def test_importing_the_project_does_not_import_trl():
    code = (
        "import sys, algorithms, algorithms.library, benchmarks.commands.library, "
        "algorithms.training.loop, graft_env, benchmarks; print('trl' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
