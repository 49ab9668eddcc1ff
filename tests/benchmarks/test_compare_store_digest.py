"""The comparison's per-step training counts come from the trajectory store: digests checked."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.storage.store import StoreCorruptError, TrajectoryStore
from benchmarks.compare.cell_run import _train_counts
from graft_env.types import AgentRollouts


def test_train_counts_refuse_a_corrupt_store_file(tmp_path):
    groups = AgentRollouts(
        agent="a",
        prompt_ids=["q0", "q1"],
        prompts=["prompt 0", "prompt 1"],
        texts=[["\\boxed{1}", "\\boxed{2}"]] * 2,
        token_ids=[[[1, 2], [3]]] * 2,
        logprobs=[[np.array([-0.1, -0.2]), np.array([-0.3])]] * 2,
        finish_reasons=[["stop", "length"]] * 2,
        rewards=np.array([[1.0, 0.0], [0.0, 0.0]]),
    )
    path = TrajectoryStore(tmp_path).write("run", 0, groups, ["ok"] * 4, "tiny-a")
    assert _train_counts(tmp_path, ("a",))["a"] == [
        {"step": 0, "prompt_ids": ["q0", "q1"], "k": [1, 0]}
    ]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match=r"a\.parquet"):
        _train_counts(tmp_path, ("a",))
