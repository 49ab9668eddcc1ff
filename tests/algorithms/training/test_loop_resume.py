"""Kill a run (between steps or mid-step), resume it, and land on the same result."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from run_configs import small_config

from algorithms.training.checkpoint import CheckpointError, save_checkpoint
from algorithms.training.loop import Trainer


class Killed(Exception):
    """Stands in for SIGKILL: the run stops wherever it is."""


def final_state(policies):
    return {a: {k: v.clone() for k, v in p.model.state_dict().items()} for a, p in policies.items()}


def _kill_after_second_step(record):
    if record.step == 1:
        raise Killed


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
    with pytest.raises(Killed):
        Trainer(config, policies=fresh_policies("tiny-a", "tiny-b")).train(
            on_step=_kill_after_second_step
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


# Every entry with state beyond the weights that could escape a checkpoint: HACPO's rolling
# capability window, the refill stream of dynamic sampling, the stored peer's log, and the
# step rng of SGT's pick, the random controls and graft-peer-random's minibatch order.
STATEFUL = [
    "hacpo",
    "grpo-dynamic",
    "graft-stored",
    "sgt",
    "graft-random-prompts",
    "graft-random-admission",
    "graft-peer-random",
]


def entry_config(run_dir, name, store_dir):
    if name == "graft-stored":
        peer = {"run_dir": str(store_dir), "agent": "tiny-b"}
        return small_config(run_dir, name, agents=("tiny-a",), steps=3, stored_peer=peer)
    agents = ("tiny-a",) if name == "grpo-dynamic" else ("tiny-a", "tiny-b")
    return small_config(run_dir, name, agents=agents, steps=3)


@pytest.mark.parametrize("name", STATEFUL)
def test_every_stateful_entry_resumes_exactly(name, tmp_path, fresh_policies):
    store_dir = tmp_path / "peer"
    if name == "graft-stored":
        peer_config = small_config(store_dir, "grpo", agents=("tiny-b",), steps=3)
        Trainer(peer_config, policies=fresh_policies("tiny-b")).train()
    agents = entry_config(tmp_path, name, store_dir).agents
    names = [a.name for a in agents]
    policies = fresh_policies(*names)
    reference = Trainer(entry_config(tmp_path / "reference", name, store_dir), policies=policies)
    reference_rows = comparable(reference.train())
    reference_weights = final_state(policies)

    config = entry_config(tmp_path / "run", name, store_dir)

    def kill_after_first_step(record):
        if record.step == 0:
            raise Killed

    with pytest.raises(Killed):
        Trainer(config, policies=fresh_policies(*names)).train(on_step=kill_after_first_step)
    policies = fresh_policies(*names)
    rows = Trainer(config, policies=policies).train()
    assert_same_weights(reference_weights, final_state(policies))
    assert comparable(rows) == reference_rows


def test_a_different_config_in_the_same_run_dir_is_refused(tmp_path, fresh_policies):
    config = small_config(tmp_path / "run", "graft", steps=1)
    Trainer(config, policies=fresh_policies("tiny-a", "tiny-b")).train()
    other = small_config(tmp_path / "run", "grpo", agents=("tiny-a",), steps=1)
    with pytest.raises(
        ValueError,
        match=r"agents\.1: \{'name': 'tiny-b', .*\} -> \(unset\); algorithm: 'graft' -> 'grpo'",
    ):
        Trainer(other, policies=fresh_policies("tiny-a")).open()


def test_a_checkpoint_whose_strategy_state_does_not_fit_is_refused(tmp_path, fresh_policies):
    config = small_config(tmp_path / "run", "hacpo", steps=2)
    policies = fresh_policies("tiny-a", "tiny-b")
    for exchange, message in (
        ({"strategy": "graft", "state": {}}, "holds the state of exchange strategy 'graft'"),
        ({"strategy": "hacpo", "state": {}}, "hacpo state must be"),
        (None, "hacpo state must be"),  # a checkpoint written before strategies had state
        (
            {"strategy": "hacpo", "state": {"success_history": {"tiny-a": [None]}}},
            r"success_history\['tiny-a'\]\[0\] = None",
        ),
    ):
        state = {"step": 1, "algorithm": "hacpo"} | ({"exchange": exchange} if exchange else {})
        save_checkpoint(tmp_path / "run" / "checkpoints", 1, policies, state)
        with pytest.raises(CheckpointError, match=f"step_000001: .*{message}"):
            Trainer(config, policies=policies).open()


def test_a_moved_run_resumes(tmp_path, fresh_policies, reference):
    """run_dir is where a run lives, not what it computes: a copy resumes elsewhere."""
    with pytest.raises(Killed):
        Trainer(
            small_config(tmp_path / "here", "graft", steps=3),
            policies=fresh_policies("tiny-a", "tiny-b"),
        ).train(on_step=_kill_after_second_step)
    shutil.copytree(tmp_path / "here", tmp_path / "there")
    policies = fresh_policies("tiny-a", "tiny-b")
    resumed = Trainer(small_config(tmp_path / "there", "graft", steps=3), policies=policies)
    resumed.open()
    assert resumed.step == 2
    assert comparable(resumed.train()) == reference[1]
    assert_same_weights(reference[0], final_state(policies))


def test_a_finished_run_extends_to_more_steps(tmp_path, fresh_policies, reference):
    """Step t's prompts and seeds depend on t, not on the total: 2 steps, then 3, are 3."""
    Trainer(
        small_config(tmp_path / "run", "graft", steps=2),
        policies=fresh_policies("tiny-a", "tiny-b"),
    ).train()
    policies = fresh_policies("tiny-a", "tiny-b")
    rows = Trainer(small_config(tmp_path / "run", "graft", steps=3), policies=policies).train()
    assert comparable(rows) == reference[1]
    assert_same_weights(reference[0], final_state(policies))


def test_a_torn_metrics_line_from_a_kill_mid_append_is_dropped(tmp_path, fresh_policies, reference):
    config = small_config(tmp_path / "run", "graft", steps=3)
    with pytest.raises(Killed):
        Trainer(config, policies=fresh_policies("tiny-a", "tiny-b")).train(
            on_step=_kill_after_second_step
        )
    with (tmp_path / "run" / "metrics.jsonl").open("a") as handle:
        handle.write('{"agent": "tiny-a", "all_fail_share": 0.')
    policies = fresh_policies("tiny-a", "tiny-b")
    rows = Trainer(config, policies=policies).train()
    assert comparable(rows) == reference[1]
    assert_same_weights(reference[0], final_state(policies))
