"""The engine-vs-trainer log-prob guard of the TRL trainers (`trl_adapter`): the gap's pure
arithmetic on real tensors, and one TRL generation batch of the tiny pair whose sampler
log-probs TRL's batch carries as vLLM's would: equal to the trainer's, the gap is logged as
0 and training goes on; off by 0.5 nats per token, training stops at step 0 with one line,
before any weight moves."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("trl")

import torch
from live_pair import import_library, library_trainer
from trl import GRPOTrainer

from algorithms.core.rollout_correction import MAX_LOGPROB_GAP, LogprobGapError
from algorithms.library.trl_adapter import gap_statistics, logprob_gap


def test_the_gap_counts_masked_tokens_with_a_sampler_log_prob_and_combines_exactly():
    """Padding and NaN (vLLM's missing log-prob) are left out; two processes combine to the
    mean over all their tokens, not the mean of their means. Every value here is a sum of a
    few float32 numbers with at most 3 significant bits, exact in float64."""
    sampler = torch.tensor([[-1.0, -2.0, float("nan"), 9.0], [-0.5, -0.25, -3.0, 0.0]])
    trainer = torch.tensor([[-1.5, -2.0, -1.0, -1.0], [-0.5, -1.25, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])
    one = logprob_gap(sampler, trainer, mask)
    assert one.dtype == torch.float64
    assert one.tolist() == [0.5 + 0.0 + 0.0 + 1.0 + 2.0, 2.0, 5.0]
    other = logprob_gap(torch.zeros(1, 2), torch.full((1, 2), -4.0), torch.tensor([[1, 0]]))
    assert other.tolist() == [4.0, 4.0, 1.0]
    assert gap_statistics(torch.stack([one, other])) == (7.5 / 6, 4.0)
    nothing = logprob_gap(sampler, trainer, torch.zeros_like(mask))
    assert nothing.tolist() == [0.0, 0.0, 0.0]
    assert gap_statistics(nothing[None]) == (0.0, 0.0)
    # a NaN of the trainer's is not vLLM's missing log-prob: it reaches the mean (the guard
    # then stops on a NaN mean)
    broken = logprob_gap(torch.zeros(1, 2), torch.tensor([[float("nan"), 0.0]]), mask[:1, :2])
    assert torch.isnan(broken[0])


def sampler_off_by(offset: float):
    """TRL's generation batch with `sampling_per_token_logps` = its old log-probs + offset
    on every completion token: what a vLLM engine's log-probs would be, off by `offset`."""
    original = GRPOTrainer._generate_and_score_completions

    def generate(self, inputs):
        batch = original(self, inputs)
        old, mask = batch["old_per_token_logps"], batch["completion_mask"]
        batch["sampling_per_token_logps"] = old + offset * mask
        return batch

    return generate


def weights(trainer) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


def test_a_sampler_far_from_the_trainer_stops_training_before_an_update(tmp_path, monkeypatch):
    """tiny-a replaying a library, one generation batch (2 optimiser steps). The sampler
    log-probs are TRL's own old log-probs, so the healthy gap is exactly 0; + 0.5 it is 0.5
    to float32 rounding of old + 0.5 (|old| < 64: an ulp below 1e-5), far above the bound."""
    library = import_library(tmp_path / "lib")
    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", sampler_off_by(0.0))
    healthy = library_trainer(library, tmp_path / "healthy", 1, 1)
    assert healthy.max_logprob_gap == MAX_LOGPROB_GAP
    healthy.train()
    logged = [row for row in healthy.state.log_history if "graft/logprob_gap_mean" in row]
    assert logged and all(row["graft/logprob_gap_mean"] == 0.0 for row in logged)
    assert all(row["graft/logprob_gap_max"] == 0.0 for row in logged)

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", sampler_off_by(0.5))
    stopped = library_trainer(library, tmp_path / "stopped", 1, 1)
    before = weights(stopped)
    with pytest.raises(LogprobGapError) as caught:
        stopped.train()
    line = str(caught.value)
    assert "\n" not in line and line.startswith("LibraryCounting agent 'receiver': step 0: ")
    assert "0.5 nats per token" in line and "max_logprob_gap=0.1" in line
    [mean] = stopped._metrics["train"]["graft/logprob_gap_mean"]
    assert mean == pytest.approx(0.5, abs=1e-5)
    after = weights(stopped)
    assert all(torch.equal(before[name], after[name]) for name in before)

    unbounded = library_trainer(library, tmp_path / "unbounded", 1, 1, max_logprob_gap=None)
    unbounded.train()  # no bound: logged, never stops
    [row] = [r for r in unbounded.state.log_history if "graft/logprob_gap_mean" in r]
    assert row["graft/logprob_gap_mean"] == pytest.approx(0.5, abs=1e-5)


@pytest.mark.parametrize("bound", [0, -0.1, "0.1", True, math.nan])
def test_a_bad_bound_is_refused_in_one_line(tmp_path, bound):
    library = import_library(tmp_path / "lib")
    expected = r"^LibraryCounting: max_logprob_gap must be a number > 0 or None, got "
    with pytest.raises(ValueError, match=expected):
        library_trainer(library, tmp_path / "out", 1, 1, max_logprob_gap=bound)


def test_vllm_without_trl_s_correction_leaves_nothing_to_check_and_is_refused(tmp_path):
    """With vLLM, TRL computes the trainer's old log-probs only for its IS correction (or
    when a generation batch spans optimiser steps): without either, a bound could never
    act, so it is refused unless None. (vLLM is not installed here: the trainer's settings
    are set as a vLLM run's would be after construction.)"""
    library = import_library(tmp_path / "lib")
    aligned = {"steps_per_generation": 1, "per_device_train_batch_size": 32}
    trainer = library_trainer(library, tmp_path / "out", 1, 1, **aligned)
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, False
    with pytest.raises(ValueError, match=r"^LibraryCounting: with vllm_importance_sampling"):
        trainer._gap_bound(0.1)
    assert trainer._gap_bound(None) is None
    trainer.vllm_importance_sampling_correction = True
    assert trainer._gap_bound(0.1) == 0.1
