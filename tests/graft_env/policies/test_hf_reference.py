"""The KL reference model of grpo-kl: the initial weights, built only when a loss asks."""

from __future__ import annotations

import pytest
import torch
from policy_batches import parameters, rollout_batch

import algorithms
import graft_env.policies.hf as hf
from graft_env.policies.training import OptimStep, optimise

KL_ROUNDING = 1e-9  # the k3 KL of two forwards of the same weights (float32 rounding only)


def test_the_kl_is_zero_at_the_initial_weights_and_positive_after_an_update(policy):
    loss_fn = algorithms.make("grpo-kl").loss
    batch = rollout_batch(policy)
    first = policy.update(batch, loss_fn)
    # one minibatch, still the initial weights: the policy's forward (with autograd) and the
    # reference's (no grad, its own copy) may run other kernels, so their float32 log-probs
    # differ by rounding, |d| <~ 1e-5, and the k3 estimator exp(d) - d - 1 ~ d^2 / 2 by
    # <~ 5e-11; an optimiser step moves log-probs by orders of magnitude more than 1e-5
    assert 0.0 <= first["loss_fn/kl"] < KL_ROUNDING
    second = policy.update(batch, loss_fn)
    assert second["loss_fn/kl"] > KL_ROUNDING
    reference = policy.reference_model()
    assert reference is not policy.model and not reference.training
    assert not any(p.requires_grad for p in reference.parameters())


def test_only_a_kl_loss_builds_a_reference_and_runs_its_forward(policy, monkeypatch):
    loads = []
    real_load = hf.load_model
    monkeypatch.setattr(hf, "load_model", lambda *args: loads.append(args) or real_load(*args))
    batch = rollout_batch(policy)
    batch.minibatches = [[0, 1, 2, 3], [4, 5, 6, 7]]
    metrics = policy.update(batch, algorithms.make("grpo").loss)
    assert loads == [] and policy._reference is None and "loss_fn/kl" not in metrics
    policy.update(batch, algorithms.make("graft").loss)
    assert loads == [] and policy._reference is None

    policy.update(batch, algorithms.make("grpo-kl").loss)
    assert len(loads) == 1 and loads[0][0] == policy.path
    forwards = {"policy": 0, "reference": 0}
    for name, model in (("policy", policy.model), ("reference", policy.reference_model())):
        model.base_model.register_forward_hook(  # the body: forwards skip the full model
            lambda *_, name=name: forwards.update({name: forwards[name] + 1})
        )
    policy.update(batch, algorithms.make("grpo-kl").loss)
    assert len(loads) == 1  # loaded once, then kept
    # Per minibatch the reference runs the policy's forward once more (a shared-prompt
    # forward is two model calls: the prompt, then the responses).
    assert forwards["reference"] == forwards["policy"] > 0


def test_after_a_resume_the_reference_is_still_the_initial_model(make_policy, model_dirs, tmp_path):
    loss_fn = algorithms.make("grpo-kl", kl_coef=0.5).loss
    original = make_policy(model_dirs["llama"])
    for seed in (1, 2):
        original.update(rollout_batch(original, seed=seed), loss_fn)
    original.save(tmp_path / "ckpt")
    resumed = make_policy(model_dirs["llama"])
    resumed.load(tmp_path / "ckpt")
    batch = rollout_batch(original, seed=3)
    ours, theirs = original.update(batch, loss_fn), resumed.update(batch, loss_fn)
    # A reference snapshotted from the resumed weights would give a KL of 0 here.
    assert theirs["loss_fn/kl"] == pytest.approx(ours["loss_fn/kl"], rel=1e-5)
    assert theirs["loss_fn/kl"] > 1e-6
    for a, b in zip(parameters(original), parameters(resumed), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    initial = make_policy(model_dirs["llama"]).model.state_dict()
    for key, value in resumed.reference_model().state_dict().items():
        assert torch.equal(value, initial[key]), key


def test_micro_batching_gives_the_same_kl_gradient(policy):
    loss_fn = algorithms.make("grpo-kl", kl_coef=1.0).loss
    batch = rollout_batch(policy, seed=4)
    prompt_ids = [policy.encode_prompt(batch.prompts[s.prompt_index]) for s in batch.sequences]
    reference = type(policy.model).from_pretrained(policy.path).eval()
    results = []
    for micro in (None, 3):
        model = type(policy.model).from_pretrained(policy.path).eval()
        with torch.no_grad():  # away from the reference, so the KL has a gradient
            for parameter in model.parameters():
                parameter.mul_(1.5)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        step = OptimStep(
            temperature=1.0,
            pad_id=policy.pad_id,
            grad_clip=1e9,
            micro_batch_size=micro,
            reference=reference,
        )
        metrics = optimise(
            model, optimizer, prompt_ids, batch.sequences, batch.minibatches, loss_fn, step
        )
        results.append((metrics, [p.detach() for p in model.parameters()]))
    (whole, whole_params), (micro, micro_params) = results
    assert whole["loss_fn/kl"] > 1e-3
    assert micro["loss_fn/kl"] == pytest.approx(whole["loss_fn/kl"], rel=1e-5)
    assert micro["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-4)
    for a, b in zip(whole_params, micro_params, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
