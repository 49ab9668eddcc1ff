"""The Parquet trajectory store: atomic per-step files, complete round trips, clear errors."""

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from algorithms.storage.store import StoreCorruptError, StoreError, TrajectoryStore, record_digest
from graft_env.types import AgentRollouts

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


def rerecord(path):
    """Record `path`'s digest again after a test rewrote it on purpose."""
    record_digest(path)


def test_write_then_read_round_trips_every_field(tmp_path):
    store = TrajectoryStore(tmp_path)
    original = rollouts("a")
    statuses = ["ok", "no_answer", "ok", "timeout", "ok", "ok"]
    store.write("run", 4, original, statuses, "tiny-a")
    back = store.read(4, "a", n=2)
    assert isinstance(back, AgentRollouts) and back.agent == "a"  # what the loop trains on
    assert back.prompt_ids == original.prompt_ids and back.prompts == original.prompts
    assert back.texts == original.texts and back.token_ids == original.token_ids
    for got, want in zip(back.logprobs, original.logprobs, strict=True):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(back.rewards, original.rewards)
    assert back.finish_reasons == original.finish_reasons
    assert back.statuses == [statuses[0:2], statuses[2:4], statuses[4:6]]


def test_a_stored_group_verified_again_keeps_its_responses_and_takes_the_new_rewards(tmp_path):
    store = TrajectoryStore(tmp_path)
    store.write("run", 0, rollouts("a"), ["ok"] * 6, "tiny-a")
    stored = store.read(0, "a", n=2)
    again = stored.with_rewards(1.0 - stored.rewards)
    assert type(again) is AgentRollouts  # the statuses stay with what was recorded
    assert (again.agent, again.texts, again.token_ids) == ("a", stored.texts, stored.token_ids)
    np.testing.assert_array_equal(again.rewards, 1.0 - stored.rewards)


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
    rerecord(path)
    message = r"step_000003/a\.parquet has no finish_reason column.*re-record"
    with pytest.raises(StoreError, match=message):
        store.read(3, "a", n=2)


def _flip(path, position: int) -> bytes:
    """Flip the low bit of byte `position`; returns the original bytes."""
    original = path.read_bytes()
    data = bytearray(original)
    data[position] ^= 1
    path.write_bytes(bytes(data))
    return original


def test_every_single_bit_flip_in_a_stored_file_is_a_one_line_error(tmp_path):
    """Issue 17: of 3,459 single-bit flips in one file, 158 silently changed a response and
    the rest raised raw pyarrow errors; every flip must name the file and step."""
    store = TrajectoryStore(tmp_path)
    path = store.write("run", 7, rollouts("a", num_prompts=6, n=4), ["ok"] * 24, "tiny-a")
    positions = np.random.default_rng(0).choice(path.stat().st_size, 250, replace=False)
    for position in [*sorted(positions.tolist()), 0, path.stat().st_size - 1]:
        original = _flip(path, position)
        with pytest.raises(StoreCorruptError) as caught:
            store.read(7, "a", n=4)
        message = str(caught.value)
        assert "\n" not in message and "step 7" in message and str(path) in message, position
        path.write_bytes(original)
    assert store.read(7, "a", n=4).texts == rollouts("a", num_prompts=6, n=4).texts


def test_a_truncated_file_or_a_corrupt_or_missing_digest_is_a_one_line_error(tmp_path):
    store = TrajectoryStore(tmp_path)
    path = store.write("run", 2, rollouts("a"), ["ok"] * 6, "tiny-a")
    manifest = path.parent / "_MANIFEST.json"
    original = path.read_bytes()
    path.write_bytes(original[: len(original) // 2])
    with pytest.raises(StoreCorruptError, match=r"a\.parquet \(step 2\).*bytes"):
        store.read(2, "a", n=2)
    rerecord(path)  # a digest that matches an unreadable file: pyarrow's error, in one line
    with pytest.raises(StoreCorruptError, match=r"a\.parquet \(step 2\) is not a readable"):
        store.read(2, "a", n=2)
    path.write_bytes(original)
    rerecord(path)
    recorded = manifest.read_bytes()
    for broken, reason in (
        (recorded[:-3], r"_MANIFEST\.json is corrupt"),
        (b'{"b.parquet": {"size": 1, "sha256": "00"}}', "no SHA-256 recorded"),
    ):
        manifest.write_bytes(broken)
        with pytest.raises(StoreCorruptError, match=rf"a\.parquet \(step 2\).*{reason}"):
            store.read(2, "a", n=2)
    manifest.unlink()
    with pytest.raises(StoreCorruptError, match=r"_MANIFEST\.json is missing"):
        store.read(2, "a", n=2)


def test_a_corrupt_meta_file_is_a_one_line_error(tmp_path):
    store = TrajectoryStore(tmp_path)
    store.write_meta({"seed": 0, "n": 4})
    assert store.read_meta() == {"seed": 0, "n": 4}
    meta = tmp_path / "trajectories" / "_meta.json"
    meta.write_text(meta.read_text().replace("0", "1"))
    with pytest.raises(StoreCorruptError, match=r"_meta\.json.*SHA-256"):
        store.read_meta()


def test_verify_checks_every_file_before_a_step(tmp_path):
    """What a resume checks: the files of the steps it keeps (later ones are rewritten)."""
    store = TrajectoryStore(tmp_path)
    for step in range(3):
        store.write("run", step, rollouts("a"), ["ok"] * 6, "tiny-a")
    _flip(store.step_path(2, "a"), 100)
    store.verify(before_step=2)
    _flip(store.step_path(1, "a"), 100)
    with pytest.raises(StoreCorruptError, match=r"step_000001/a\.parquet \(step 1\)"):
        store.verify(before_step=2)
