"""graft-stored: a receiver trains alone against a partner run's trajectory store."""

from __future__ import annotations

import numpy as np
import pyarrow.dataset as ds
import pytest
from cut_cap import seed_and_cap
from run_configs import small_config

from algorithms.storage.store import StoreError
from algorithms.training.loop import Trainer
from algorithms.training.step import StepRecord


def test_stored_replay_reproduces_the_live_selection_and_endings(tmp_path, fresh_policies):
    # Live one-way-comparable run: no balancing and graft-stored's candidates (Eq.4), so
    # its a->b selection is all of C_{a->b}. tiny-b is listed first so it samples with the
    # same seed as when it trains alone. The seed and cap come from the pair's own samples
    # (`cut_cap`): some a->b responses are cut, some end, and their finish reasons must
    # survive the store.
    def live_step(seed: int, cap: int) -> StepRecord:
        trainer = Trainer(
            small_config(
                tmp_path / f"live-seed{seed}-cap{cap}",
                "graft-no-balance",
                ("tiny-b", "tiny-a"),
                steps=1,
                options={"candidates": "informative"},
                seed=seed,
                sampling={"max_new_tokens": cap},
            ),
            policies=fresh_policies("tiny-b", "tiny-a"),
        )
        trainer.open()
        return trainer.run_step()

    seed, cap = seed_and_cap(live_step, ("tiny-b",))
    live_record = live_step(seed, cap)
    live_dir = tmp_path / f"live-seed{seed}-cap{cap}"
    table = ds.dataset(live_dir / "trajectories", format="parquet").to_table()
    assert table.num_rows == 2 * 6 * 4

    stored = Trainer(
        small_config(
            tmp_path / "stored",
            "graft-stored",
            agents=("tiny-b",),
            steps=1,
            seed=seed,
            sampling={"max_new_tokens": cap},
            stored_peer={"run_dir": str(live_dir), "agent": "tiny-a"},
        ),
        policies=fresh_policies("tiny-b"),
    )
    stored.open()
    stored_record = stored.run_step()

    def selection(record):
        return sorted(
            (g.prompt_index, tuple(g.texts), tuple(tuple(s.token_ids) for s in g.scored))
            for g in record.transfers["tiny-b"]
        )

    np.testing.assert_array_equal(
        stored_record.rollouts["tiny-b"].rewards, live_record.rollouts["tiny-b"].rewards
    )
    replayed = stored_record.rollouts["tiny-a"].finish_reasons
    assert replayed == live_record.rollouts["tiny-a"].finish_reasons
    moved = [
        replayed[g.prompt_index][i]
        for g in stored_record.transfers["tiny-b"]
        for i in g.response_indices
    ]
    assert "length" in moved and "stop" in moved, (seed, cap, moved)
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
