"""The rollout correction in the loop (`rollout_correction` of the run config), on the tiny pair:
off changes nothing, monitor measures and trains as off, truncate trains own rows against the
trainer's rescoring with the pure function's weights, peer rows are never touched, and an
engine too far from the trainer stops the run before its step trains."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from correction_runs import NOISE, PREFIX, Key, Recording, perturb
from run_configs import small_config

from algorithms.core.rollout_correction import LogprobGapError
from algorithms.training.loop import Trainer
from graft_env.policies.base import Done


def run(tmp_path, name, algorithm="graft", agents=("tiny-a", "tiny-b"), steps=1, **extra):
    """A fixed-seed run's policies, metrics rows and step records."""
    return small_config(tmp_path / name, algorithm, agents=agents, steps=steps, **extra)


def train(config, policies):
    records = []
    rows = Trainer(config, policies=policies).train(on_step=records.append)
    return rows, records


def without(rows, *prefixes):
    return [{k: v for k, v in r.items() if not k.startswith(prefixes)} for r in rows]


def own_rows(batch, agent):
    return [s for s in batch.sequences if not s.is_peer and s.source == agent]


def test_off_and_monitor_train_alike_and_monitor_finds_the_hf_engine_agrees(
    tmp_path, fresh_policies
):
    """The HF policy records log-probs with the forward it scores with, so monitor's metrics
    show a mismatch at float rounding (no stop at max_logprob_gap 0.1); and monitor trains
    bit for bit as off does."""
    trained = {}
    for mode in ("off", "monitor"):
        bounded = {"mode": mode, "max_logprob_gap": 0.1}  # the HF engine stays far below it
        extra = {} if mode == "off" else {"rollout_correction": bounded}
        policies = fresh_policies("tiny-a", "tiny-b")
        rows, _ = train(run(tmp_path, mode, steps=2, **extra), policies)
        weights = {
            a: {k: v.clone() for k, v in p.model.state_dict().items()} for a, p in policies.items()
        }
        trained[mode] = rows, weights
    off_rows, monitor_rows = trained["off"][0], trained["monitor"][0]
    assert not any(k.startswith(PREFIX) or k == "time/rescoring" for r in off_rows for k in r)
    assert without(monitor_rows, PREFIX, "time/") == without(off_rows, "time/")
    for agent, state in trained["off"][1].items():
        for key, tensor in state.items():
            assert torch.equal(tensor, trained["monitor"][1][agent][key]), f"{agent}.{key}"
    for row in monitor_rows:
        assert row["time/rescoring"] > 0
        measured = row[PREFIX + "responses"]
        assert measured + row[PREFIX + "retokenised"] == row["rollouts_generated"]
        assert measured > row["rollouts_generated"] / 2 and row[PREFIX + "tokens"] > 0
        assert row[PREFIX + "logp_diff_max"] < 1e-4 and row[PREFIX + "kl_k3"] < 1e-8
        assert row[PREFIX + "weight_mean"] == 1.0
        assert row[PREFIX + "ratio_mean"] == pytest.approx(1.0, abs=1e-4)
        assert row[PREFIX + "above_cap_share"] == row[PREFIX + "below_floor_share"] == 0.0


def test_truncate_on_the_hf_policy_trains_own_rows_against_its_own_rescoring(
    tmp_path, fresh_policies
):
    """Own rows train against the trainer's log-probs of their own tokens (equal to the
    recorded ones to float rounding, so weights ~1); a row given another response's
    log-probs, or a peer row touched, would show here."""
    config = run(tmp_path, "truncate", rollout_correction={"mode": "truncate"})
    _, [record] = train(config, fresh_policies("tiny-a", "tiny-b"))
    for agent, batch in record.batches.items():
        own = record.rollouts[agent]
        corrected = 0
        for seq in own_rows(batch, agent):
            p = seq.prompt_index
            same = [i for i in range(own.n) if own.token_ids[p][i] == seq.response_token_ids]
            if seq.rollout_weights is None:  # retokenised: trains as sampled
                assert any(own.train_logprobs[p][i] is None for i in same)
                continue
            corrected += 1
            assert any(np.array_equal(seq.old_logprobs, own.train_logprobs[p][i]) for i in same)
            recorded = np.asarray(own.logprobs[p][same[0]], dtype=np.float64)
            np.testing.assert_allclose(seq.old_logprobs, recorded, atol=1e-4)
            np.testing.assert_allclose(seq.rollout_weights, 1.0, atol=1e-4)
        assert corrected > len(own_rows(batch, agent)) / 2
        assert all(s.rollout_weights is None for s in batch.sequences if s.is_peer)


class NoisyEngine:
    """A policy whose sampling records log-probs off by N(0, 0.5) per token (an engine that
    disagrees with the trainer); `update` first scores the batch at θ_old with the trainer."""

    def __init__(self, policy) -> None:
        self.inner = policy
        # (prompt, token ids) -> each response with those tokens' true and noisy recordings
        self.sampled: dict[Key, list[Recording]] = {}
        self.trainer_logprobs: list[np.ndarray] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, prompts, n, sampling):
        groups = self.inner.generate(prompts, n, sampling)
        return perturb(prompts, groups, sampling.seed, NOISE, self.sampled)

    def generate_async(self, prompts, n, sampling):
        return Done(self.generate(prompts, n, sampling))

    def update_async(self, batch, loss_fn):
        prompts = [batch.prompts[s.prompt_index] for s in batch.sequences]
        ids = [s.response_token_ids for s in batch.sequences]
        self.trainer_logprobs = self.inner.score_tokens(prompts, ids)
        return self.inner.update_async(batch, loss_fn)


def test_truncate_corrects_a_perturbed_engine_as_the_pure_function_says(tmp_path, fresh_policies):
    engine = NoisyEngine(fresh_policies("tiny-a")["tiny-a"])
    config = run(tmp_path, "noisy", "grpo", agents=("tiny-a",), rollout_correction={})
    trainer = Trainer(config, policies={"tiny-a": engine})
    records = []
    [row] = trainer.train(on_step=records.append)
    batch = records[0].batches["tiny-a"]
    weighted = [j for j, s in enumerate(batch.sequences) if s.rollout_weights is not None]
    assert len(weighted) > len(batch.sequences) / 2
    capped = below_one = 0
    off_engine = []
    for j in weighted:
        seq = batch.sequences[j]
        trainer_logp = np.asarray(engine.trainer_logprobs[j], dtype=np.float64)
        np.testing.assert_allclose(seq.old_logprobs, trainer_logp, atol=1e-5)
        # the response's own recording (identical responses of a group had their own noise)
        key = batch.prompts[seq.prompt_index], tuple(seq.response_token_ids)
        noisy = [recording.noisy for recording in engine.sampled[key]]
        expected = [np.minimum(np.exp(trainer_logp - lp), 2.0) for lp in noisy]
        mine = [np.allclose(seq.rollout_weights, e, rtol=1e-4) for e in expected]
        assert any(mine), (seq.rollout_weights, expected)
        sampled = noisy[mine.index(True)]
        off_engine += np.abs(seq.old_logprobs - sampled).tolist()
        capped += int(np.sum(seq.rollout_weights == 2.0))
        below_one += int(np.sum(seq.rollout_weights < 0.9))
    assert capped > 0 and below_one > 0
    assert np.mean(off_engine) > 0.3  # the old log-probs are not the engine's
    assert 0.3 < row[PREFIX + "logp_diff_mean"] < 0.5  # E|N(0, 0.5)| = 0.40
    assert row[PREFIX + "above_cap_share"] > 0 and row[PREFIX + "weight_mean"] < 2.0

    # At θ_old (new = old, every ratio 1) each token's term is its advantage times its
    # weight; the token count divides (the loss of rows without weights would be the same
    # sum with every weight 1).
    first = batch.sequences
    assert any(s.advantage != 0 for s in first)
    width = max(len(s.old_logprobs) for s in first)
    new_logp = torch.zeros(len(first), width, dtype=torch.float64)
    for r, seq in enumerate(first):
        new_logp[r, : len(seq.old_logprobs)] = torch.as_tensor(seq.old_logprobs)
    loss, _ = trainer.algorithm.loss(new_logp, first)
    tokens = sum(len(s.old_logprobs) for s in first)
    weights = [
        np.ones(len(s.old_logprobs)) if s.rollout_weights is None else s.rollout_weights
        for s in first
    ]
    expected = -sum(s.advantage * w.sum() for s, w in zip(first, weights, strict=True)) / tokens
    unweighted = -sum(s.advantage * len(s.old_logprobs) for s in first) / tokens
    assert loss.item() == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert abs(expected - unweighted) > 1e-3


def test_an_engine_past_max_logprob_gap_stops_the_run_before_the_update(tmp_path, fresh_policies):
    """The perturbed engine is off by E|N(0, 0.5)| = 0.40 nats per token on average, four
    times the bound: step 0 stops with its gap named, and no policy has been updated."""
    engine = NoisyEngine(fresh_policies("tiny-a")["tiny-a"])
    bounded = {"mode": "monitor", "max_logprob_gap": 0.1}
    config = run(tmp_path, "stopped", "grpo", agents=("tiny-a",), rollout_correction=bounded)
    with pytest.raises(
        LogprobGapError, match=r"^agent tiny-a: step 0: .* above max_logprob_gap=0.1"
    ):
        Trainer(config, policies={"tiny-a": engine}).train()
    assert engine.trainer_logprobs == []  # update_async was never reached
