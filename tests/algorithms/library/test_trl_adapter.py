"""graft-library inside TRL's GRPOTrainer (`algorithms.library.trl_adapter`): on fixed rollouts
of tiny-a and a library of tiny-a and tiny-b runs, the batch the adapter hands TRL's loss is
the one this project's own exchange and `build_batches` build; one real TRL training run
trains on it: own groups first, peer groups last."""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("trl")

import torch
from datasets import Dataset
from library_runs import ENV, run_config
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig

import algorithms
from algorithms.library import build_library, read_library
from algorithms.library.source import LibrarySource
from algorithms.library.trl_adapter import GraftGRPOTrainer, math_reward
from algorithms.rollouts import step_rng
from algorithms.training.loop import Trainer
from graft_env.envs import MultiAgentMathEnv
from graft_env.policies import load_policy
from graft_env.types import AgentRollouts

N, CHUNKS, SEED = 4, 2, 0
# transformers >= 5.24 renamed gradient_checkpointing (the old name warns, removed in v6)
CHECKPOINTING = next(
    name
    for name in ("activation_checkpointing", "gradient_checkpointing")
    if name in inspect.signature(GRPOConfig).parameters
)
SOLVED_AT = 1  # the batch position of the one prompt the receiver's fixed texts solve


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
def batch(library, policy) -> list[str]:
    """The six batch problems, chosen from what the library holds (which groups the peers'
    runs made informative depends on their trained weights, so on the CPU): three whose
    library groups Eq.4 can take (1 <= k < n), then, interleaved, three it has nothing
    usable for; the receiver's fixed texts solve the one at SOLVED_AT. Peer prompts come
    first, so that peer-last visibly reorders them."""
    usable = [g for g in read_library(library) if 0 < g.k < N]
    ids = [p.id for p in problem_pool(policy).problems]
    rescuable = [i for i in ids if any(g.prompt_id == i for g in usable)]
    others = [i for i in ids if i not in rescuable]
    of_tiny_b = [
        i for i in rescuable if any(g.prompt_id == i for g in usable if g.agent == "tiny-b")
    ]
    assert len(rescuable) >= 3 and len(others) >= 3 and of_tiny_b, (
        f"the peers' runs left {len(rescuable)} prompts with a usable group ({len(of_tiny_b)} "
        f"of them tiny-b's) and {len(others)} without: the fixture needs 3 (1) and 3"
    )
    peers = [of_tiny_b[0], *[i for i in rescuable if i != of_tiny_b[0]][:2]]  # 2 tokenizers
    return [peers[0], others[0], peers[1], others[1], peers[2], others[2]]


def problem_pool(policy) -> MultiAgentMathEnv:
    return MultiAgentMathEnv(
        agents=["tiny-a"],
        dataset=ENV["dataset"],
        split=ENV["split"],
        dataset_options=ENV["dataset_options"],
        batch_size=6,
        n=N,
        formatters={"tiny-a": policy.format_prompt},
    )


@pytest.fixture(scope="module")
def env(policy):
    return problem_pool(policy)


def batch_indices(env, batch) -> list[int]:
    ids = [problem.id for problem in env.problems]
    return [ids.index(name) for name in batch]


def fixed_texts(problem, solved: str) -> list[str]:
    """The receiver's fixed responses: two correct ones for `solved`, all wrong elsewhere."""
    if problem.id == solved:
        good = f"\\boxed{{{problem.answer}}}"
        return [f"The sum is {good}.", "\\boxed{0}", f"so {good}", "no idea"]
    return ["\\boxed{0}", "I think \\boxed{1}", "no idea", "\\boxed{-7}"]


def project_batch(library, policy, env, batch, delta):
    """What this project's loop builds for these rollouts: the library lookup, graft-library's
    exchange (the receiver's HFPolicy scores the peer texts) and `build_batches`, with TRL's
    eps (1e-4) and its micro-batch count, on the loop's step rng."""
    indices = batch_indices(env, batch)
    problems = [env.problems[i] for i in indices]
    prompts = [policy.format_prompt(p.problem) for p in problems]
    texts = [fixed_texts(p, batch[SOLVED_AT]) for p in problems]
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
        "per_device_train_batch_size": 6 * N // CHUNKS,
        "steps_per_generation": CHUNKS,
        "gradient_accumulation_steps": 1,
        "max_completion_length": 64,
        "temperature": 1.0,  # the tiny pair's log-prob temperature
        "beta": 0.0,
        "loss_type": "bnpo",  # Eq.10: token mean per optimiser step
        "learning_rate": 1e-3,
        "use_cpu": True,
        "bf16": False,
        CHECKPOINTING: False,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "logging_steps": 1,
        "max_steps": CHUNKS,
        "seed": SEED,
        **extra,
    }
    return GRPOConfig(**options)


def fixed_trainer(tmp_path, policy, env, library, batch, rows=None, reward=math_reward, **options):
    """A GraftGRPOTrainer on tiny-a whose generation returns `fixed_texts` of each prompt."""
    by_prompt = {
        tuple(policy.encode_prompt(policy.format_prompt(p.problem))): [
            policy.encode_response(t, "stop") for t in fixed_texts(p, batch[SOLVED_AT])
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


def peer_weights(library, policy, env, batch) -> list[np.ndarray]:
    """w = min(s, 1) of every transferred response with no floor (delta 0): the s values the
    receiver's weights give these library groups (on another CPU, others)."""
    expected, _, _ = project_batch(library, policy, env, batch, 0.0)
    by_prompt: dict[int, list[float]] = {}
    for seq in expected.sequences:
        if seq.is_peer:
            by_prompt.setdefault(seq.prompt_index, []).append(seq.weight)
    return [np.array(w) for _, w in sorted(by_prompt.items())]


def splitting_delta(weights: list[np.ndarray]) -> float:
    """A floor between the lowest two distinct scores, so that it removes a response and keeps
    others (with w = s < 1 where there are such)."""
    values = np.unique(np.concatenate(weights))
    if values.size < 2:
        return min(float(values[0]) / 2, 0.5)
    return float(values[:2].mean())


@pytest.mark.parametrize("floor", ["between the scores", "default"])
def test_the_batch_trl_trains_on_is_the_projects(tmp_path, library, policy, env, batch, floor):
    """A floor set between the measured scores keeps some transferred responses with w = s
    and removes the lowest; the default 0.8 removes what scores at most 0.8. Every retained
    row of every micro-batch, in order, is the project's: exact token ids and prompt,
    advantage x weight to 1e-6, old log-probs."""
    weights = peer_weights(library, policy, env, batch)
    assert len(weights) == 3  # the three prompts with a usable library group
    delta = splitting_delta(weights) if floor != "default" else 0.8
    expected, lookup, stats = project_batch(library, policy, env, batch, delta)
    assert stats["replaced_groups"] == 3
    removed_by_floor = [int(np.sum(w <= delta)) for w in weights]
    assert stats["removed_peer_responses"] == sum(removed_by_floor)
    assert stats["fully_removed_groups"] == sum(r == N for r in removed_by_floor)
    if floor != "default":
        assert 0 < stats["removed_peer_responses"] < 3 * N

    trainer = fixed_trainer(tmp_path, policy, env, library, batch, graft_options={"delta": delta})
    trainer.model.train()
    rows = dataset_rows(policy, [env.problems[i] for i in batch_indices(env, batch)])
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
            # two float32 batchings of the same forward: a log-prob l = logit - logsumexp is
            # off by some ulps of its terms (|terms| < 40), so relative to |l|
            np.testing.assert_allclose(old, seq.old_logprobs, rtol=1e-5, atol=1e-5)
    assert removed == stats["removed_peer_responses"]
    # peer-last: the own groups (fully removed ones included) fill the first micro-batch
    assert not chunks[0]["graft_peer"].any() and chunks[1]["graft_peer"].all()

    metrics = trainer._metrics["train"]
    for name, value in lookup.counts.items():
        assert metrics[name] == [value]
    assert metrics["library/used_groups"] == [3.0]
    assert metrics["library/removed_peer_responses"] == [float(removed)]
    assert metrics["library/peer_sequences"] == [float(stats["peer_sequences"])]


def test_one_trl_training_run_trains_own_groups_then_peer_groups(
    tmp_path, library, policy, env, batch
):
    """`trainer.train()` on the 6 batch problems: TRL samples (fixed texts), rewards, and takes
    its 2 optimiser steps on the adapter's micro-batches, own first, the 3 rescued groups last
    (a floor below every score: no group is fully removed)."""
    problems = [env.problems[i] for i in batch_indices(env, batch)]
    delta = min(float(np.min(np.concatenate(peer_weights(library, policy, env, batch)))) / 2, 0.5)
    trainer = fixed_trainer(
        tmp_path, policy, env, library, batch, rows=dataset_rows(policy, problems),
        graft_options={"delta": delta},
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
    tmp_path, policy, env, library, batch, options, error
):
    problems = [env.problems[i] for i in batch_indices(env, batch)]
    with pytest.raises(ValueError, match=error):
        trainer = fixed_trainer(
            tmp_path, policy, env, library, batch, rows=dataset_rows(policy, problems), **options
        )
        trainer.train()


def test_importing_the_project_does_not_import_trl():
    code = (
        "import sys, algorithms, algorithms.library, benchmarks.commands.library, "
        "algorithms.training.loop, graft_env, benchmarks; print('trl' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
