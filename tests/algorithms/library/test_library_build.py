"""A library built from two GRPO runs of the peer with different seeds (and so data orders)
holds every stored group of both, keyed by problem text; `graft library build` and `show`."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.dataset as ds
import pytest
from library_runs import ENV

from algorithms.library import build_library, prompt_key, read_library
from algorithms.library.format import LibraryError
from benchmarks import cli
from graft_env.data import load


def store_rows(run_dir):
    """The run store's rows, read without the library code: {(step, prompt_index): rows}."""
    table = ds.dataset(run_dir / "trajectories", format="parquet").to_table().to_pylist()
    groups: dict[tuple[int, int], list[dict]] = {}
    for row in sorted(table, key=lambda r: (r["step"], r["prompt_index"], r["response_index"])):
        groups.setdefault((row["step"], row["prompt_index"]), []).append(row)
    return groups


def test_a_library_of_two_runs_holds_every_group_of_both(tmp_path, peer_runs):
    stores = [store_rows(run) for run in peer_runs]
    first_prompts = [[rows[0]["prompt_id"] for (s, _), rows in g.items() if s == 0] for g in stores]
    assert first_prompts[0] != first_prompts[1]  # two data orders
    build_library(peer_runs, tmp_path / "lib")
    groups = read_library(tmp_path / "lib")
    assert len(groups) == sum(len(s) for s in stores) == 2 * 3 * ENV["batch_size"]

    problems = {p.id: p.problem for p in load("procedural", "train", **ENV["dataset_options"])}
    by_id = {g.group_id: g for g in groups}
    for run, store in zip(peer_runs, stores, strict=True):
        for (step, p), rows in store.items():
            group = by_id[f"{run.resolve()}#tiny-a/{step}/{p}"]
            assert group.key == prompt_key(problems[rows[0]["prompt_id"]])
            assert (group.prompt_id, group.step, group.model_id) == (
                rows[0]["prompt_id"],
                step,
                "tiny-a",
            )
            assert group.texts == [r["response"] for r in rows]
            assert group.token_ids == [r["token_ids"] for r in rows]
            assert group.finish_reasons == [r["finish_reason"] for r in rows]
            assert group.statuses == [r["status"] for r in rows]
            np.testing.assert_array_equal(group.rewards, [r["reward"] for r in rows])
            for got, r in zip(group.logprobs, rows, strict=True):
                np.testing.assert_array_equal(got, r["logprobs"])
            assert group.logprob_origins == ["generation"] * len(rows)
    # groups of the same prompt from the two runs share its key
    keys = [{g.key for g in groups if g.source == str(run.resolve())} for run in peer_runs]
    assert keys[0] & keys[1]
    later = [g.generated_at for g in groups if g.source == str(peer_runs[1].resolve())]
    assert min(later) >= max(
        g.generated_at for g in groups if g.source == str(peer_runs[0].resolve())
    )


def test_a_corrupt_run_store_is_refused_with_the_file_named(tmp_path, peer_runs):
    copy = tmp_path / "copy"
    shutil.copytree(peer_runs[0], copy)
    part = copy / "trajectories" / "step_000001" / "tiny-a.parquet"
    data = bytearray(part.read_bytes())
    data[100] ^= 0x01
    part.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{part} \(step 1\) does not match its SHA-256"):
        build_library([copy], tmp_path / "lib")
    assert not (tmp_path / "lib").exists()


def test_graft_library_build_and_show(tmp_path, peer_runs, capsys):
    lib = tmp_path / "lib"
    assert cli.main(["library", "build", str(peer_runs[0]), "--out", str(lib)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {lib / 'part-000000.parquet'}" in out and "18 groups, 72 responses" in out
    assert cli.main(["library", "build", str(peer_runs[1]), "--out", str(lib), "--append"]) == 0
    assert "36 groups, 144 responses" in capsys.readouterr().out
    assert cli.main(["library", "show", str(lib), "--prompts"]) == 0
    out = capsys.readouterr().out
    for run in peer_runs:
        assert f"{run.resolve()} [tiny-a]: 18 groups (n=4: 18), 72 responses" in out
    assert "steps 0-2" in out and "groups per prompt: 1: " in out

    assert cli.main(["library", "build", str(peer_runs[0]), "--out", str(lib), "--append"]) == 2
    assert "already holds 18 of these groups" in capsys.readouterr().err
    part = lib / "part-000001.parquet"
    part.write_bytes(part.read_bytes()[:-1] + b"\x00")
    assert cli.main(["library", "show", str(lib)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graft library: error: ") and str(part) in err
    with pytest.raises(LibraryError):
        read_library(lib)
