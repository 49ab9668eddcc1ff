"""The library on disk: prompt keys, round trips, and one-line errors for damaged or foreign
files (no models)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from algorithms.library.format import (
    SCHEMA,
    LibraryError,
    LibraryGroup,
    normalise_problem,
    prompt_key,
    read_library,
    write_library,
)
from algorithms.storage.store import record_digest


def group(number: int, n: int = 3, logprobs: bool = True) -> LibraryGroup:
    rng = np.random.default_rng(number)
    return LibraryGroup(
        group_id=f"src#{number}",
        key=prompt_key(f"Compute {number} + 1."),
        problem=f"Compute {number} + 1.",
        dataset="procedural/train",
        prompt_id=f"p{number}",
        source="src",
        agent="tiny-a" if number % 2 else None,
        model_id="tiny-a",
        tokenizer_id="tiny-a",
        step=number if number % 2 else None,
        generated_at=1000.0 + number,
        texts=[f"\\boxed{{{number + i}}}" for i in range(n)],
        token_ids=[list(range(i + 2)) if number % 2 else None for i in range(n)],
        logprobs=[-rng.random(i + 2) if logprobs else None for i in range(n)],
        logprob_origins=["generation" if logprobs else "missing"] * n,
        finish_reasons=["stop", "length", "stop"][:n],
        rewards=np.array([1.0, 0.0, 0.0][:n]),
        statuses=["ok", "ok", "no_answer"][:n],
    )


def assert_same(got: LibraryGroup, want: LibraryGroup) -> None:
    for name in ("group_id", "key", "problem", "dataset", "prompt_id", "source", "agent"):
        assert getattr(got, name) == getattr(want, name), name
    for name in ("model_id", "tokenizer_id", "step", "generated_at", "texts", "token_ids"):
        assert getattr(got, name) == getattr(want, name), name
    assert got.finish_reasons == want.finish_reasons and got.statuses == want.statuses
    assert got.logprob_origins == want.logprob_origins
    np.testing.assert_array_equal(got.rewards, want.rewards)
    for a, b in zip(got.logprobs, want.logprobs, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)


@given(st.text(max_size=40), st.sampled_from([" ", "\t", "\n", "  \n ", "\u3000"]))
def test_the_key_ignores_whitespace_runs_and_the_ends(text, space):
    words = text.split()
    assert prompt_key(" ".join(words)) == prompt_key(space + space.join(words) + space)


@given(st.text(max_size=40))
def test_the_key_is_the_same_for_every_unicode_composition(text):
    decomposed = unicodedata.normalize("NFD", text)
    assert prompt_key(decomposed) == prompt_key(unicodedata.normalize("NFC", text))
    assert normalise_problem(normalise_problem(text)) == normalise_problem(text)


def test_the_key_keeps_what_carries_meaning():
    assert prompt_key("Compute 2^3.") != prompt_key("compute 2^3.")
    assert prompt_key("Compute x².") != prompt_key("Compute x2.")  # no compatibility folding
    assert prompt_key("Compute 12.") != prompt_key("Compute 1 2.")


def test_write_then_read_round_trips_every_field_and_reads_as_one_dataset(tmp_path):
    groups = [group(j) for j in range(4)] + [group(9, logprobs=False)]
    write_library(groups[:2], tmp_path / "lib", append=False)
    write_library(groups[2:], tmp_path / "lib", append=True)
    back = {g.group_id: g for g in read_library(tmp_path / "lib")}
    assert sorted(back) == sorted(g.group_id for g in groups)
    for want in groups:
        assert_same(back[want.group_id], want)
    table = ds.dataset(tmp_path / "lib", format="parquet").to_table()
    assert table.num_rows == 15 and table.schema.names == SCHEMA.names
    assert not list(tmp_path.glob(".*tmp"))


def test_a_library_is_not_overwritten_and_a_group_is_added_once(tmp_path):
    write_library([group(0)], tmp_path / "lib", append=False)
    with pytest.raises(LibraryError, match="exists: add to a library with --append"):
        write_library([group(1)], tmp_path / "lib", append=False)
    with pytest.raises(LibraryError, match=r"already holds 1 of these groups \(e.g. src#0\)"):
        write_library([group(0), group(1)], tmp_path / "lib", append=True)
    assert [g.group_id for g in read_library(tmp_path / "lib")] == ["src#0"]
    with pytest.raises(LibraryError, match=r"group src#2 is given twice"):
        write_library([group(2), group(2)], tmp_path / "lib2", append=False)
    assert not (tmp_path / "lib2").exists()


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_a_flipped_bit_is_a_one_line_error_naming_the_file(tmp_path):
    part = write_library([group(j) for j in range(3)], tmp_path / "lib", append=False)
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x10
    part.write_bytes(bytes(data))
    with pytest.raises(LibraryError) as error:
        read_library(tmp_path / "lib")
    message = _one_line(error)
    assert str(part) in message and "does not match its SHA-256" in message
    assert "rebuild the library" in message


def test_a_part_with_another_schema_is_a_one_line_error_naming_file_and_column(tmp_path):
    part = write_library([group(1)], tmp_path / "lib", append=False)
    table = pq.read_table(part)
    changed = table.set_column(
        table.schema.get_field_index("step"), "step", table.column("step").cast(pa.float64())
    )
    pq.write_table(changed, part)
    record_digest(part)  # an intact file, of another layout
    with pytest.raises(LibraryError) as error:
        read_library(tmp_path / "lib")
    message = _one_line(error)
    assert str(part) in message and "step: double (expected int64)" in message


def test_another_version_is_a_one_line_error(tmp_path):
    write_library([group(1)], tmp_path / "lib", append=False)
    meta = tmp_path / "lib" / "_library.json"
    meta.write_text(json.dumps({"format": "graft-trajectory-library", "version": 2}))
    record_digest(meta)
    with pytest.raises(LibraryError) as error:
        read_library(tmp_path / "lib")
    assert f"{meta}: library version 2, this graft reads version 1" in _one_line(error)


def test_a_part_of_another_version_is_refused(tmp_path):
    part = write_library([group(1)], tmp_path / "lib", append=False)
    table = pq.read_table(part)
    pq.write_table(table.replace_schema_metadata({b"graft_library_version": b"0"}), part)
    record_digest(part)
    with pytest.raises(LibraryError, match=r"part of library version 0, expected 1"):
        read_library(tmp_path / "lib")


def test_a_missing_part_is_an_error(tmp_path):
    write_library([group(0)], tmp_path / "lib", append=False)
    second = write_library([group(1)], tmp_path / "lib", append=True)
    second.unlink()
    with pytest.raises(LibraryError, match=r"part-000001.parquet is missing \(listed in"):
        read_library(tmp_path / "lib")
    with pytest.raises(LibraryError, match="not a trajectory library"):
        read_library(tmp_path / "nowhere")


def test_graft_library_show_loads_no_torch(tmp_path):
    write_library([group(0), group(1, logprobs=False)], tmp_path / "lib", append=False)
    code = (
        "import sys\nfrom benchmarks import cli\n"
        f"assert cli.main(['library', 'show', {str(tmp_path / 'lib')!r}]) == 0\n"
        "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "2 groups, 6 responses, 2 prompts" in done.stdout
    assert "src [tiny-a]: 2 groups (n=3: 2), 6 responses, 2 prompts, steps 1-1, 3 responses" in (
        done.stdout
    )


def test_a_part_left_unrecorded_by_an_interrupted_append_is_ignored_with_a_warning(
    tmp_path, monkeypatch, caplog
):
    # the manifest is the commit point: killed after the part's rename, before its record
    import algorithms.library.format as library_format

    write_library([group(0)], tmp_path / "lib", append=False)

    def killed(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(library_format, "record_digest", killed)
    with pytest.raises(KeyboardInterrupt):
        write_library([group(1)], tmp_path / "lib", append=True)
    monkeypatch.undo()
    orphan = tmp_path / "lib" / "part-000001.parquet"
    assert orphan.is_file()
    assert [g.group_id for g in read_library(tmp_path / "lib")] == ["src#0"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and str(orphan) in warnings[0] and "ignored" in warnings[0]
    assert "\n" not in warnings[0]
    # the next append neither reuses the orphan's name nor is blocked by it
    part = write_library([group(1)], tmp_path / "lib", append=True)
    assert part.name == "part-000002.parquet"
    assert sorted(g.group_id for g in read_library(tmp_path / "lib")) == ["src#0", "src#1"]


def test_builds_and_appends_of_one_library_take_turns(tmp_path):
    import fcntl
    import threading

    write_library([group(0)], tmp_path / "lib", append=False)
    locks = [p for p in tmp_path.iterdir() if p.name.endswith(".lock")]
    assert [p.name for p in locks] == [".lib.lock"]
    done = threading.Event()

    def append():
        write_library([group(1)], tmp_path / "lib", append=True)
        done.set()

    with locks[0].open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another build holds the library
        writer = threading.Thread(target=append)
        writer.start()
        assert not done.wait(0.5)
        assert [g.group_id for g in read_library(tmp_path / "lib")] == ["src#0"]
    writer.join(10)
    assert done.is_set()
    assert sorted(g.group_id for g in read_library(tmp_path / "lib")) == ["src#0", "src#1"]


def test_a_library_without_its_manifest_names_the_library(tmp_path):
    write_library([group(0)], tmp_path / "lib", append=False)
    manifest = tmp_path / "lib" / "_MANIFEST.json"
    manifest.unlink()
    with pytest.raises(LibraryError) as error:
        read_library(tmp_path / "lib")
    message = _one_line(error)
    assert f"{manifest} is missing" in message and "rebuild the library" in message
    assert "record the run" not in message and "trajectory store" not in message


def test_a_library_file_that_cannot_be_written_is_named_as_one(tmp_path, monkeypatch):
    import errno

    import algorithms.storage.store

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(algorithms.storage.store.os, "fsync", full)
    with pytest.raises(OSError) as caught:
        write_library([group(0)], tmp_path / "lib", append=False)
    assert caught.value.strerror == "No space left on device; the library file was not written"

    def manifest_full(fd):  # the part is written, its record is not
        if os.readlink(f"/proc/self/fd/{fd}").endswith("_MANIFEST.json.tmp"):
            full(fd)

    monkeypatch.setattr(algorithms.storage.store.os, "fsync", manifest_full)
    with pytest.raises(OSError) as caught:
        write_library([group(0)], tmp_path / "lib", append=False)
    assert caught.value.filename.endswith("_MANIFEST.json")
    assert caught.value.strerror == "No space left on device; the manifest was not written"


def _changed(value, kind: pa.DataType):
    """Another value of a column's type."""
    if isinstance(value, list):
        return [*value, value[-1]] if value else [1]
    if value is None:
        return 1.0 if pa.types.is_floating(kind) else 1
    return value + ("x" if isinstance(value, str) else 1)


def test_every_column_written_is_read_back(tmp_path):
    part = write_library([group(1)], tmp_path / "lib", append=False)
    original = repr(read_library(tmp_path / "lib"))
    table = pq.read_table(part)
    for index, field in enumerate(SCHEMA):
        values = table.column(index).to_pylist()
        values[0] = _changed(values[0], field.type)
        pq.write_table(table.set_column(index, field, pa.array(values, field.type)), part)
        record_digest(part)
        try:
            changed = repr(read_library(tmp_path / "lib"))
        except LibraryError:
            continue  # read, and refused: the column is checked
        assert changed != original, f"column {field.name!r} is written but never read"


def test_graft_library_show_gives_the_group_sizes(tmp_path, capsys):
    from benchmarks import cli

    # e.g. a 3-epoch log without step column: one group of every response to a prompt
    write_library([group(0), group(1, n=2), group(2)], tmp_path / "lib", append=False)
    assert cli.main(["library", "show", str(tmp_path / "lib")]) == 0
    assert "src [tiny-a]: 3 groups (n=2: 1, n=3: 2), 8 responses" in capsys.readouterr().out


def test_an_append_to_no_library_says_so_and_writes_nothing(tmp_path):
    with pytest.raises(LibraryError) as error:
        write_library([group(0)], tmp_path / "new" / "lib", append=True)
    assert _one_line(error) == (
        f"{tmp_path / 'new' / 'lib'} is not a trajectory library (no such directory): "
        "build it without --append"
    )
    assert list(tmp_path.iterdir()) == []
