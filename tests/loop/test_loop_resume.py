"""Kill a run (between steps or mid-step), resume it, and land on the same result."""

from __future__ import annotations

import json

import pytest
import torch
from run_configs import small_config

from algorithms.loop import Trainer


class Killed(Exception):
    """Stands in for SIGKILL: the run stops wherever it is."""


def final_state(policies):
    return {a: {k: v.clone() for k, v in p.model.state_dict().items()} for a, p in policies.items()}


def comparable(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def assert_same_weights(a, b):
    for agent in a:
        for key in a[agent]:
            assert torch.equal(a[agent][key], b[agent][key]), f"{agent}.{key} differs"


@pytest.fixture
def reference(tmp_path_factory, fresh_policies):
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    policies = fresh_policies("tiny-a", "tiny-b")
    rows = Trainer(small_config(run_dir, "graft", steps=3), policies=policies).train()
    return final_state(policies), comparable(rows)


def test_resume_between_steps_reproduces_the_uninterrupted_run(tmp_path, fresh_policies, reference):
    config = small_config(tmp_path / "run", "graft", steps=3)

    def kill_after_second_step(record):
        if record.step == 1:
            raise Killed

    with pytest.raises(Killed):
        Trainer(config, policies=fresh_policies("tiny-a", "tiny-b")).train(
            on_step=kill_after_second_step
        )
    policies = fresh_policies("tiny-a", "tiny-b")
    rows = Trainer(config, policies=policies).train()
    assert_same_weights(reference[0], final_state(policies))
    assert comparable(rows) == reference[1]


def test_resume_after_a_mid_step_kill_and_a_corrupt_checkpoint(tmp_path, fresh_policies, reference):
    config = small_config(tmp_path / "run", "graft", steps=3)
    policies = fresh_policies("tiny-a", "tiny-b")
    trainer = Trainer(config, policies=policies)
    real_update = policies["tiny-b"].update

    def update_then_die(batch, loss_fn):
        if trainer.step == 2:  # third step: tiny-a has already updated, tiny-b dies
            raise Killed
        return real_update(batch, loss_fn)

    policies["tiny-b"].update = update_then_die
    with pytest.raises(Killed):
        trainer.train()
    # Corrupt the newest checkpoint (step 2): resume must fall back to step 1.
    newest = tmp_path / "run" / "checkpoints" / "step_000002"
    weights = next(newest.glob("tiny-a/*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-16])
    policies = fresh_policies("tiny-a", "tiny-b")
    resumed = Trainer(config, policies=policies)
    resumed.open()
    assert resumed.step == 1
    rows = resumed.train()
    assert_same_weights(reference[0], final_state(policies))
    assert comparable(rows) == reference[1]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 0, 1, 1, 2, 2]


def test_a_different_config_in_the_same_run_dir_is_refused(tmp_path, fresh_policies):
    config = small_config(tmp_path / "run", "graft", steps=1)
    Trainer(config, policies=fresh_policies("tiny-a", "tiny-b")).train()
    other = small_config(tmp_path / "run", "grpo", agents=("tiny-a",), steps=1)
    with pytest.raises(ValueError, match="different config"):
        Trainer(other, policies=fresh_policies("tiny-a")).open()
