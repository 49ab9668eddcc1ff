"""End to end: the peer controls (graft-twin, graft-shuffled) train the real tiny pair for two
steps through the one loop, the twin resampling through the loop's `ResamplingScorer`."""

from __future__ import annotations

import numpy as np
import pytest
from run_configs import small_config

from algorithms.exchange.controls import TWIN_MAX_ROUNDS, TWIN_SUFFIX
from algorithms.training.loop import Trainer

AGENTS = ("tiny-a", "tiny-b")
# 16 prompts x 4 samples: enough all-fail prompts of one model that the other solves
ENV = {
    "dataset": "procedural",
    "split": "train",
    "dataset_options": {"size": 40, "difficulty": 1},
    "batch_size": 16,
}


def train(tmp_path, fresh_policies, exchange: str):
    records = []
    config = small_config(tmp_path / exchange, "graft", env=ENV, options={"exchange": exchange})
    rows = Trainer(config, policies=fresh_policies(*AGENTS)).train(on_step=records.append)
    return rows, records


def test_twin_peer_fills_the_gated_prompts_from_the_receiver(tmp_path, fresh_policies):
    rows, records = train(tmp_path, fresh_policies, "graft-twin")
    assert [row["step"] for row in rows] == [0, 0, 1, 1]
    assert all(np.isfinite(row["loss"]) for row in rows)
    gated = 0
    for record in records:
        extra = record.exchange_stats.extra
        for receiver in AGENTS:
            peer = next(a for a in AGENTS if a != receiver)
            groups = record.transfers[receiver]
            assert {g.source for g in groups} <= {receiver + TWIN_SUFFIX}
            prefix = f"exchange/{receiver}{TWIN_SUFFIX}->{receiver}/graft-twin"
            filled, asked = extra[f"{prefix}/filled_prompts"], extra[f"{prefix}/gated_prompts"]
            assert len(groups) == filled <= asked
            assert extra[f"{prefix}/rounds"] <= TWIN_MAX_ROUNDS
            assert record.exchange_stats.directions[(peer, receiver)].transferred == 0
            own = record.rollouts[receiver]
            for group in groups:  # an informative group of the receiver's own, on its prompt
                assert own.k[group.prompt_index] == 0
                assert 0 < np.count_nonzero(group.advantages > 0) < len(group.advantages)
            gated += asked
    assert gated > 0, "no prompt was gated in two steps: the test exercised no resampling"
    assert (
        f"exchange/{rows[0]['agent']}{TWIN_SUFFIX}->{rows[0]['agent']}/graft-twin/rounds" in rows[0]
    )


def test_twin_peer_resampling_is_reproducible(tmp_path, fresh_policies):
    first, _ = train(tmp_path / "one", fresh_policies, "graft-twin")
    second, _ = train(tmp_path / "two", fresh_policies, "graft-twin")

    def twin(rows):
        return [{k: v for k, v in row.items() if "/graft-twin/" in k} for row in rows]

    assert all(twin(first)) and twin(first) == twin(second)


def test_shuffled_peer_moves_graft_groups_with_permuted_rewards(tmp_path, fresh_policies):
    rows, records = train(tmp_path, fresh_policies, "graft-shuffled")
    assert all(np.isfinite(row["loss"]) for row in rows)
    moved = 0
    for record in records:
        for receiver in AGENTS:
            for group in record.transfers[receiver]:
                source = record.rollouts[group.source]
                rewards = source.rewards[group.prompt_index]
                assert group.texts == source.texts[group.prompt_index]
                assert sorted(group.advantages) == pytest.approx(
                    sorted(source.advantages[group.prompt_index])
                )
                moved += int(np.any(group.advantages * (rewards - rewards.mean()) < 0))
    assert moved > 0, "no transferred group had a reward moved in two steps"
