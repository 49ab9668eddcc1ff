"""The Parquet trajectory store: atomic per-step files, complete round trips, clear errors."""

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from algorithms.store import StoreError, TrajectoryStore
from algorithms.types import AgentRollouts

ENDINGS = ("stop", "length")


def rollouts(agent: str, num_prompts: int = 3, n: int = 2) -> AgentRollouts:
    rng = np.random.default_rng(0)
    return AgentRollouts(
        agent=agent,
        prompt_ids=[f"q{p}" for p in range(num_prompts)],
        prompts=[f"prompt {p}" for p in range(num_prompts)],
        texts=[[f"answer {p}.{i} \\boxed{{{p}}}" for i in range(n)] for p in range(num_prompts)],
        token_ids=[[list(range(p + i + 1)) for i in range(n)] for p in range(num_prompts)],
        logprobs=[[-rng.random(p + i + 1) for i in range(n)] for p in range(num_prompts)],
        finish_reasons=[[ENDINGS[(p + i) % 2] for i in range(n)] for p in range(num_prompts)],
        rewards=rng.integers(0, 2, size=(num_prompts, n)).astype(float),
    )


def test_write_then_read_round_trips_every_field(tmp_path):
    store = TrajectoryStore(tmp_path)
    original = rollouts("a")
    statuses = ["ok", "no_answer", "ok", "timeout", "ok", "ok"]
    store.write("run", 4, original, statuses, "tiny-a")
    back = store.read(4, "a", n=2)
    assert back.prompt_ids == original.prompt_ids and back.prompts == original.prompts
    assert back.texts == original.texts and back.token_ids == original.token_ids
    for got, want in zip(back.logprobs, original.logprobs, strict=True):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(back.rewards, original.rewards)
    assert back.finish_reasons == original.finish_reasons
    assert back.statuses == [statuses[0:2], statuses[2:4], statuses[4:6]]


def test_files_are_readable_with_standard_tools(tmp_path):
    store = TrajectoryStore(tmp_path)
    store.write("run", 0, rollouts("a"), ["ok"] * 6, "tiny-a")
    store.write("run", 1, rollouts("b"), ["ok"] * 6, "tiny-b")
    table = ds.dataset(tmp_path / "trajectories", format="parquet").to_table()
    assert table.num_rows == 12
    assert set(table.column("agent").to_pylist()) == {"a", "b"}
    assert not list((tmp_path / "trajectories").rglob("*.tmp"))


def test_missing_step_and_incomplete_groups_are_errors(tmp_path):
    store = TrajectoryStore(tmp_path)
    with pytest.raises(StoreError, match="no stored trajectories for agent 'a' at step 2"):
        store.read(2, "a", n=2)
    store.write("run", 0, rollouts("a", n=2), ["ok"] * 6, "tiny-a")
    with pytest.raises(StoreError, match=r"not a multiple of n=4"):
        store.read(0, "a", n=4)
    with pytest.raises(StoreError, match=r"_meta\.json is missing"):
        store.read_meta()


def test_a_store_without_finish_reasons_is_refused_naming_the_file(tmp_path):
    """Files written before finish reasons were stored cannot say which responses ended
    with EOS (the source's EOS id is not stored either): no default may stand in."""
    store = TrajectoryStore(tmp_path)
    path = store.write("run", 3, rollouts("a"), ["ok"] * 6, "tiny-a")
    pq.write_table(pq.read_table(path).drop_columns(["finish_reason"]), path)
    message = r"step_000003/a\.parquet has no finish_reason column.*re-record"
    with pytest.raises(StoreError, match=message):
        store.read(3, "a", n=2)
