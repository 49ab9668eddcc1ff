"""Live GRAFT between TRL trainers (`algorithms.library.trl_live`) on the tiny pair with fixed
texts (`live_pair`): on one step, what each TRL agent trains on (transfers, weights,
advantages, old log-probs, minibatch order), its loss and its gradients equal the native
loop's exchange (`Algorithm.compute_advantages`, `exchange`, `build_batches`, `loss`, as
`Trainer.run_step` calls them) on the same responses; and end to end, two agents of two
processes each exchange in both directions in lockstep, every process scoring, a stopped
agent stops its peer with one line, and rerunning resumes from checkpoints and records."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl")

import torch
from live_pair import (
    AGENTS,
    CHUNKS,
    MODELS,
    SEED,
    THREE,
    N,
    dataset_rows,
    fixed_texts,
    import_library,
    live_trainer,
    problems,
)

import algorithms
from algorithms.rollouts import step_rng
from graft_env.envs import MultiAgentMathEnv
from graft_env.policies import load_policy
from graft_env.policies.forward import response_logprobs
from graft_env.types import AgentRollouts

HERE = Path(__file__).parent
RTOL = 1e-5  # float32 log-probs of two batchings (see the equality test)


def native_step(delta: float, agents: list[str]):
    """The native loop's step on the pair's fixed texts: each agent's rollouts (its own
    tokenisation and generation log-probs), advantages, the exchange with every agent a
    receiver, and the batches, with TRL's advantage eps (1e-4) and micro-batch count."""
    policies = {agent: load_policy(MODELS[agent]) for agent in agents}
    env = MultiAgentMathEnv(
        agents=agents, dataset="procedural", split="train",
        dataset_options={"size": 4, "difficulty": 1}, batch_size=8, n=N,
    )  # fmt: skip
    chosen = problems()
    indices = [[p.id for p in env.problems].index(p.id) for p in chosen]
    rollouts = {}
    for agent, policy in policies.items():
        prompts = [policy.format_prompt(p.problem) for p in chosen]
        texts = [fixed_texts(agent, j, p.answer) for j, p in enumerate(chosen)]
        ids = [[policy.encode_response(t, "stop") for t in group] for group in texts]
        logprobs = [policy.score_tokens([q] * N, g) for q, g in zip(prompts, ids, strict=True)]
        rewards, _ = env.score_groups(indices, {agent: texts})
        rollouts[agent] = AgentRollouts(
            agent, [p.id for p in chosen], prompts, texts, ids, logprobs,
            [["stop"] * N for _ in chosen], rewards[agent],
        )  # fmt: skip
    algorithm = algorithms.make(
        "graft", n=N, num_minibatches=CHUNKS, adv_eps=1e-4, adv_ddof=1, delta=delta
    )
    algorithm.compute_advantages(rollouts)

    def scorer(receiver, prompt_indices, texts, reasons):
        prompts = [rollouts[receiver].prompts[p] for p in prompt_indices]
        return policies[receiver].score(prompts, list(texts), list(reasons))

    rng = step_rng(SEED, 0)
    exchanged = algorithm.exchange(rollouts, agents, scorer, rng)
    batches, _ = algorithm.build_batches(rollouts, exchanged.transfers, agents, rng)
    return algorithm, policies, exchanged.transfers, batches


def floor_between_scores(agents: list[str]) -> float:
    """A floor between the two lowest distinct compatibility scores of the step (delta 0
    keeps w = min(s, 1)), so that it removes some transferred responses and keeps others,
    far from both (the scores depend on the tiny pair's trained weights)."""
    _, _, transfers, _ = native_step(0.0, agents)
    scores = np.unique(np.concatenate([g.weights for ts in transfers.values() for g in ts]))
    return float(scores[:2].mean()) if scores.size > 1 else float(scores[0]) / 2


def trl_step(tmp_path: Path, delta: float, agents: list[str]) -> dict:
    """The TRL agents' first generation batch, each in its own thread (they meet in the
    channel), in the given problem order; the agents' trainers with their micro-batches."""
    trainers = {
        agent: live_trainer(
            agent,
            tmp_path / "channel",
            tmp_path / agent,
            processes=1,
            steps=1,
            timeout=120,
            graft_options={"delta": delta},
            agents=agents,
        )
        for agent in agents
    }
    errors = []

    def prepare(agent: str) -> None:
        trainer = trainers[agent]
        trainer.model.train()
        try:
            trainer._prepare_inputs([row for row in dataset_rows(agent) for _ in range(N)])
        except Exception as error:  # reported below, from the test's thread
            errors.append(error)

    threads = [threading.Thread(target=prepare, args=(agent,)) for agent in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return trainers


@pytest.mark.parametrize("agents", [AGENTS, THREE], ids=["2 agents", "3 agents"])
def test_one_live_step_equals_the_native_loop(tmp_path, agents):
    """Same transfers, weights (and floor removals), advantages x weights, old log-probs,
    minibatch order, loss and gradients, for every receiver; with 3 agents by the §8
    extension, which every agent computes over the agents in the same order.

    Tolerances: both sides run the same float32 weights on the same tokens; they differ only
    in how rows are batched and padded (TRL pads to its batch, the native forward to its
    micro-batch), which reorders float32 sums inside the matmuls and the log-softmax. A
    log-prob l = logit - logsumexp is then off by some ulps of its terms (float32: 6e-8
    relative; |terms| < 40): RTOL = 1e-5 relative bounds that over a hundredfold. A score
    s = exp(mean l_R - mean l_S) takes both means' errors (|mean l| < 20 here): |ds| <= s x
    2 x 20 x RTOL = 4e-4 s, with s <= 1 for a kept weight, so weights and a w (|a| < 2) to
    1e-3. The loss is a token mean of ratio x (a w) with ratio = exp(l - l_old) = 1 up to
    the same error: 1e-3 too; a gradient entry sums such terms' derivatives over the
    minibatch: 1e-4 of the largest entry (a few 1e-6 seen). Advantages alone come from the
    same float64 formula on the same rewards on both sides (checked through a w)."""
    delta = floor_between_scores(agents)
    algorithm, policies, transfers, batches = native_step(delta, agents)
    moved = {r: sorted((g.source, g.prompt_index) for g in ts) for r, ts in transfers.items()}
    if agents == AGENTS:
        assert moved == {"tiny-a": [("tiny-b", 1)], "tiny-b": [("tiny-a", 0)]}  # both ways
    assert all(moved.values())  # every agent receives
    removed = sum(int(np.sum(g.weights == 0)) for ts in transfers.values() for g in ts)
    kept = sum(int(np.sum(g.weights > 0)) for ts in transfers.values() for g in ts)
    assert removed and kept  # the floor removes some and keeps some
    trainers = trl_step(tmp_path, delta, agents)

    for agent, trainer in trainers.items():
        expected, policy = batches[agent], policies[agent]
        chunks = trainer._buffered_inputs
        assert len(chunks) == len(expected.minibatches) == CHUNKS
        trainer.current_gradient_accumulation_steps = 1
        for chunk, minibatch in zip(chunks, expected.minibatches, strict=True):
            kept_rows = (chunk["completion_mask"].sum(dim=1) > 0).nonzero().flatten().tolist()
            assert len(kept_rows) == len(minibatch)
            sequences = [expected.sequences[j] for j in minibatch]
            for row, seq in zip(kept_rows, sequences, strict=True):
                mask = chunk["completion_mask"][row].bool()
                assert chunk["completion_ids"][row][mask].tolist() == seq.response_token_ids
                prompt = chunk["prompt_ids"][row][chunk["prompt_mask"][row].bool()].tolist()
                assert prompt == policy.encode_prompt(expected.prompts[seq.prompt_index])
                assert bool(chunk["graft_peer"][row]) == seq.is_peer
                weight = float(chunk["graft_weight"][row])
                assert weight == pytest.approx(seq.weight, abs=1e-3)
                advantage = float(chunk["advantages"][row])
                assert advantage == pytest.approx(seq.advantage * seq.weight, abs=1e-3)
                old = chunk["old_per_token_logps"][row][mask].double().numpy()
                np.testing.assert_allclose(old, seq.old_logprobs, rtol=RTOL, atol=RTOL)

            trainer.model.zero_grad()
            trl_loss = trainer.compute_loss(trainer.model, chunk)
            trl_loss.backward()
            policy.model.zero_grad()
            new_logp = response_logprobs(
                policy.model,
                [policy.encode_prompt(expected.prompts[s.prompt_index]) for s in sequences],
                [list(s.response_token_ids) for s in sequences],
                pad_id=policy.pad_id,
                temperature=policy.temperature,
            ).logprobs
            loss, _ = algorithm.loss(new_logp, sequences)
            loss.backward()
            assert float(trl_loss.detach()) == pytest.approx(float(loss.detach()), abs=1e-3)
            ours = dict(policy.model.named_parameters())
            for name, param in trainer.model.named_parameters():
                theirs = ours[name].grad
                scale = max(float(theirs.abs().max()), 1e-12)
                torch.testing.assert_close(param.grad, theirs, rtol=0, atol=1e-4 * scale)
        metrics = trainer._metrics["train"]
        assert metrics["exchange/used_groups"] == [float(len(transfers[agent]))]
        assert metrics["exchange/removed_peer_responses"] == [
            float(sum(int(np.sum(g.weights == 0)) for g in transfers[agent]))
        ]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"graft_options": {"admission": "random"}}, "draw from the step's random generator"),
        ({"graft_options": {"eps_low": 0.1}}, "are not exchange options"),
        ({"steps_per_generation": 1, "per_device_train_batch_size": 32}, "no sampler log-probs"),
    ],
)
def test_settings_the_live_exchange_cannot_honour_are_refused(tmp_path, options, error):
    with pytest.raises(ValueError, match=error):
        live_trainer("tiny-a", tmp_path / "c", tmp_path / "a", 1, 1, 10, **options)


def launch(
    agent: str, root: Path, steps: int, port: int, channel: Path | None = None, **env
) -> subprocess.Popen:
    """One agent under its own `accelerate launch` with 2 processes (gloo on CPU); `channel`:
    the rendezvous folder (default ROOT/channel), or the library of agent "library"."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
        "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(port), str(HERE / "live_pair.py"), agent,
        str(channel or root / "channel"), str(root / agent), str(steps),
    ]  # fmt: skip
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parents[2]), str(HERE.parents[1]), str(HERE)]),
        "GRAFT_TEST_TIMEOUT": "60",
        **env,
    }
    log = open(root / f"{agent}.log", "a")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT)


def run_pair(root: Path, steps: int, stop_b_at: int | None = None) -> dict[str, int]:
    extra = {} if stop_b_at is None else {"GRAFT_TEST_STOP_AT": str(stop_b_at)}
    agents = {
        "tiny-a": launch("tiny-a", root, steps, 29631),
        "tiny-b": launch("tiny-b", root, steps, 29641, **extra),
    }
    return {agent: process.wait(timeout=600) for agent, process in agents.items()}


@pytest.mark.slow
def test_two_agents_of_two_processes_exchange_live_stop_together_and_resume(tmp_path):
    """tiny-b is killed at step 2 (of 3): tiny-a stops with one line naming it; rerun, both
    resume from their checkpoints and the channel and finish in lockstep, each step
    exchanging both ways, and on every step both processes of a receiver ran the same
    scoring forward passes, one of them on padding rows only."""
    codes = run_pair(tmp_path, steps=3, stop_b_at=CHUNKS * 2)
    log_a = (tmp_path / "tiny-a.log").read_text()
    assert codes["tiny-b"] != 0 and codes["tiny-a"] != 0, log_a[-3000:]
    assert "waited 60 s for the step-4 record of 'tiny-b'" in log_a

    codes = run_pair(tmp_path, steps=3)
    logs = {agent: (tmp_path / f"{agent}.log").read_text() for agent in AGENTS}
    assert codes == {"tiny-a": 0, "tiny-b": 0}, logs["tiny-b"][-3000:]
    for agent, log in logs.items():
        met = [int(s) for s in re.findall(rf"step (\d+): {agent} met", log)]
        # first run: steps 0 and 2 (tiny-b stopped before meeting at 4); rerun: step 4
        assert met == [0, 2, 4], (agent, met)
        assert (tmp_path / agent / f"checkpoint-{CHUNKS * 3}").is_dir()
        ranks = [json.loads((tmp_path / agent / f"scoring-{r}.json").read_text()) for r in (0, 1)]
        assert [c["step"] for c in ranks[0]] == [c["step"] for c in ranks[1]] == [4]
        for mine, other in zip(*ranks, strict=True):
            assert mine["forwards"] == other["forwards"] > 0
            assert sorted([mine["own_rows"], other["own_rows"]]) == [0, N]
    for step in (0, 2, 4):
        for agent in AGENTS:
            assert (tmp_path / "channel" / f"step-{step:06d}" / f"{agent}.json").is_file()


@pytest.mark.slow
def test_library_replay_of_two_processes_scores_on_both(tmp_path):
    """The stored-library mode on the same path: tiny-a of 2 processes replays tiny-b's
    imported groups; on each step the library rescues problem 1, held by one process, and
    both processes run the same scoring forwards (the other on padding rows only)."""
    library = import_library(tmp_path / "lib")
    code = launch("library", tmp_path, steps=2, port=29651, channel=library).wait(timeout=600)
    log = (tmp_path / "library.log").read_text()
    assert code == 0, log[-3000:]
    ranks = [json.loads((tmp_path / "library" / f"scoring-{r}.json").read_text()) for r in (0, 1)]
    assert [c["step"] for c in ranks[0]] == [c["step"] for c in ranks[1]] == [0, CHUNKS]
    for mine, other in zip(*ranks, strict=True):
        assert mine["forwards"] == other["forwards"] > 0
        assert sorted([mine["own_rows"], other["own_rows"]]) == [0, N]
    assert "'library/used_groups': '1'" in log


def test_a_resumed_sampler_draws_the_epoch_the_run_it_continues_drew():
    """Epoch e's prompt order depends on (seed, e) alone, not on the epochs drawn before."""
    from trl.trainer.utils import RepeatSampler

    from algorithms.library.trl_batch import EpochSampler

    def order(sampler: EpochSampler, epoch: int) -> list[int]:
        sampler.set_epoch(epoch)
        return list(sampler)

    def fresh() -> EpochSampler:
        return EpochSampler(RepeatSampler(range(8), 2, 4, 2, shuffle=True, seed=5))

    run = fresh()
    epochs = [order(run, epoch) for epoch in range(3)]
    assert order(fresh(), 2) == epochs[2] and epochs[2] != epochs[0]


def test_a_truncated_response_is_published_whole_under_mask_truncated_completions(
    tmp_path, monkeypatch
):
    """TRL zeroes a truncated row's whole completion mask under mask_truncated_completions,
    but rewards its whole text: the record carries that text and its ids, and the peer
    receiving the group scores it (an empty response there crashed the receiver)."""
    import live_pair

    fixed = live_pair.by_prompt

    def cut(agent: str) -> dict:
        table = fixed(agent)
        if agent == "tiny-a":  # problem 0's first response cut at the token limit: no EOS
            key = next(iter(table))
            table[key][0] = table[key][0][:-1]
        return table

    monkeypatch.setattr(live_pair, "by_prompt", cut)
    channel = tmp_path / "channel"
    trainers = {
        agent: live_trainer(
            agent,
            channel,
            tmp_path / agent,
            1,
            1,
            60,
            graft_options={"delta": 0.0},
            mask_truncated_completions=True,
        )
        for agent in AGENTS
    }
    errors: dict[str, str] = {}

    def prepare(agent: str) -> None:
        trainer = trainers[agent]
        trainer.model.train()
        try:
            trainer._prepare_inputs([row for row in dataset_rows(agent) for _ in range(N)])
        except Exception as error:  # reported below, by agent
            errors[agent] = f"{type(error).__name__}: {error}"

    threads = [threading.Thread(target=prepare, args=(agent,)) for agent in AGENTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == {}
    record = json.loads((channel / "step-000000" / "tiny-a.json").read_text())["payload"]
    cut_ids = cut("tiny-a")[next(iter(cut("tiny-a")))][0]
    assert record["token_ids"][0][0] == cut_ids and record["texts"][0][0]
    assert record["finish_reasons"][0][0] == "length"
