"""graft-stored: a receiver trains alone against a partner run's trajectory store."""

from __future__ import annotations

import numpy as np
import pyarrow.dataset as ds
import pytest
from run_configs import small_config

from algorithms.loop import Trainer
from algorithms.store import StoreError


def test_stored_replay_reproduces_the_live_selection(tmp_path, fresh_policies):
    # Live one-way-comparable run: no balancing, so its b->a selection is all of C_{b->a}.
    live = Trainer(
        small_config(tmp_path / "live", "graft-no-balance", steps=1),
        policies=fresh_policies("tiny-a", "tiny-b"),
    )
    live.open()
    live_record = live.run_step()
    table = ds.dataset(tmp_path / "live" / "trajectories", format="parquet").to_table()
    assert table.num_rows == 2 * 6 * 4

    stored = Trainer(
        small_config(
            tmp_path / "stored",
            "graft-stored",
            agents=("tiny-a",),
            steps=1,
            stored_peer={"run_dir": str(tmp_path / "live"), "agent": "tiny-b"},
        ),
        policies=fresh_policies("tiny-a"),
    )
    stored.open()
    stored_record = stored.run_step()

    def selection(record):
        return sorted((g.prompt_index, tuple(g.texts)) for g in record.transfers["tiny-a"])

    np.testing.assert_array_equal(
        stored_record.rollouts["tiny-a"].rewards, live_record.rollouts["tiny-a"].rewards
    )
    assert selection(stored_record) == selection(live_record)


def test_a_mismatched_store_is_a_clear_error(tmp_path, fresh_policies):
    Trainer(
        small_config(tmp_path / "live", "grpo", agents=("tiny-b",), steps=1),
        policies=fresh_policies("tiny-b"),
    ).train()
    config = small_config(
        tmp_path / "stored",
        "graft-stored",
        agents=("tiny-a",),
        steps=2,
        seed=5,
        stored_peer={"run_dir": str(tmp_path / "live"), "agent": "tiny-b"},
    )
    with pytest.raises(StoreError, match="seed: stored 0 vs ours 5"):
        Trainer(config, policies=fresh_policies("tiny-a"))
    config = small_config(
        tmp_path / "stored2",
        "graft-stored",
        agents=("tiny-a",),
        steps=2,
        stored_peer={"run_dir": str(tmp_path / "live"), "agent": "tiny-b"},
    )
    trainer = Trainer(config, policies=fresh_policies("tiny-a"))
    trainer.open()
    trainer.run_step()
    with pytest.raises(StoreError, match="no stored trajectories for agent 'tiny-b' at step 1"):
        trainer.run_step()
