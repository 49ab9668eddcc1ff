"""End to end: the optional GRPO entries of GRAFT-SPEC §6 (dr-grpo, grpo-kl) on one agent."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from run_configs import small_config

from algorithms.training.loop import Trainer


class Killed(Exception):
    """Stands in for SIGKILL between two steps."""


def weights(policy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.model.state_dict().items()}


def comparable(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.parametrize("name", ["dr-grpo", "grpo-kl"])
def test_one_agent_trains_with_the_entry(name, tmp_path, fresh_policies):
    policies = fresh_policies("tiny-a")
    before = weights(policies["tiny-a"])
    records = []
    config = small_config(tmp_path / name, name, agents=("tiny-a",), steps=2)
    rows = Trainer(config, policies=policies).train(on_step=records.append)
    after = weights(policies["tiny-a"])
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert [row["step"] for row in rows] == [0, 1]
    assert all(np.isfinite(row["loss"]) and row["grad_norm"] > 0 for row in rows)
    rollouts = [record.rollouts["tiny-a"] for record in records]
    assert any(0 < k < 4 for r in rollouts for k in r.k)  # something to learn from
    if name == "dr-grpo":  # r - mean(R), no std division
        for r in rollouts:
            np.testing.assert_allclose(r.advantages, r.rewards - r.rewards.mean(1, keepdims=True))
        assert all("loss_fn/kl" not in row for row in rows)
    else:
        # Step 0's first minibatch runs at the initial weights (KL 0), its second after an
        # update, so both steps average a positive KL.
        assert all(row["loss_fn/kl"] > 0 for row in rows), [row["loss_fn/kl"] for row in rows]
        assert policies["tiny-a"]._reference is not None


def test_grpo_kl_resumes_against_the_initial_reference(tmp_path, fresh_policies):
    uninterrupted = fresh_policies("tiny-a")
    config = small_config(tmp_path / "reference", "grpo-kl", agents=("tiny-a",), steps=3)
    expected_rows = comparable(Trainer(config, policies=uninterrupted).train())
    expected = weights(uninterrupted["tiny-a"])

    config = small_config(tmp_path / "run", "grpo-kl", agents=("tiny-a",), steps=3)

    def kill_after_second_step(record):
        if record.step == 1:
            raise Killed

    with pytest.raises(Killed):
        Trainer(config, policies=fresh_policies("tiny-a")).train(on_step=kill_after_second_step)
    resumed = fresh_policies("tiny-a")
    rows = comparable(Trainer(config, policies=resumed).train())
    assert rows == expected_rows  # the KL of step 2 is to the initial weights, not step 2's
    got = weights(resumed["tiny-a"])
    for key, value in expected.items():
        assert torch.equal(value, got[key]), key
