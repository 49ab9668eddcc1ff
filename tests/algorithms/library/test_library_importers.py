"""Importing rollouts from elsewhere: a run's rollouts exported as JSONL/Parquet and imported
come back as the groups the run store gives, re-verified; without log-probs the entries are
marked and refused, or scored with the source model."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from library_runs import ENV, run_config

from algorithms.library import ImportSpec, build_library, import_rollouts, importers, read_library
from algorithms.library.format import LibraryError
from algorithms.training.loop import Trainer
from algorithms.training.run_config import LibrarySpec
from benchmarks import cli
from graft_env.data import load

PROBLEMS = {p.id: p for p in load("procedural", "train", **ENV["dataset_options"])}


def exported(run_dir, logprobs: bool = True) -> list[dict]:
    """The run's rollouts as another framework's log would hold them: one row per response,
    the problem text (not this project's prompt), no group structure."""
    table = ds.dataset(run_dir / "trajectories", format="parquet").to_table().to_pylist()
    table.sort(key=lambda r: (r["step"], r["prompt_index"], r["response_index"]))
    return [
        {
            "question": PROBLEMS[r["prompt_id"]].problem,
            "completion": r["response"],
            "reward": r["reward"],
            "finish_reason": r["finish_reason"],
            "step": r["step"],
            **({"logprobs": r["logprobs"], "token_ids": r["token_ids"]} if logprobs else {}),
        }
        for r in table
    ]


def spec(path, columns=(), **changes) -> ImportSpec:
    """The exported files' import: this dataset, their column names (and `columns`)."""
    return ImportSpec(
        path=str(path),
        model="tiny-a",
        dataset="procedural",
        split="train",
        dataset_options=ENV["dataset_options"],
        columns={"prompt": "question", "response": "completion", **dict(columns)},
        **changes,
    )


def by_prompt_and_step(groups):
    return {(g.key, g.step): g for g in groups}


def test_a_jsonl_import_round_trips_the_run_and_re_verifies(tmp_path, peer_runs):
    rows = exported(peer_runs[0])
    for row in rows[:3]:
        row["reward"] = 1.0 - row["reward"]  # the exporter's reward is not trusted
    rows.append({**rows[0], "question": "What is the capital of France?"})
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    summary = import_rollouts(spec(path), tmp_path / "lib")
    assert (summary.groups, summary.responses, summary.skipped_rows) == (18, 72, 1)
    assert (summary.reward_changed, summary.missing_logprobs, summary.rescored) == (3, 0, 0)

    build_library([peer_runs[0]], tmp_path / "built")
    built = by_prompt_and_step(read_library(tmp_path / "built"))
    imported = by_prompt_and_step(read_library(tmp_path / "lib"))
    assert imported.keys() == built.keys()
    for where, want in built.items():
        got = imported[where]
        assert (got.texts, got.token_ids) == (want.texts, want.token_ids)
        assert (got.finish_reasons, got.statuses) == (want.finish_reasons, want.statuses)
        np.testing.assert_array_equal(got.rewards, want.rewards)
        for a, b in zip(got.logprobs, want.logprobs, strict=True):
            np.testing.assert_array_equal(a, b)
        assert got.prompt_id == want.prompt_id and got.model_id == "tiny-a"
        assert got.logprob_origins == ["generation"] * 4 and got.agent is None


def test_without_log_probs_entries_are_marked_and_graft_library_refuses_them(tmp_path, peer_runs):
    path = tmp_path / "rollouts.parquet"
    pq.write_table(pa.Table.from_pylist(exported(peer_runs[0], logprobs=False)), path)
    summary = import_rollouts(spec(path, format="parquet"), tmp_path / "lib")
    assert summary.missing_logprobs == summary.responses == 72
    groups = read_library(tmp_path / "lib")
    assert all(g.logprob_origins == ["missing"] * 4 for g in groups)
    assert all(lp is None for g in groups for lp in g.logprobs)
    config = run_config(
        tmp_path / "r",
        "graft-library",
        "tiny-b",
        4,
        steps=1,
        library={"path": str(tmp_path / "lib")},
    )
    with pytest.raises(LibraryError) as error:
        Trainer(config)
    message = str(error.value)
    assert "\n" not in message and "have no generation log-probs" in message
    # what it says to do works (importing again into this library cannot: it holds them)
    assert (
        "import their file again into a new library, as a library holds each group once "
        f"(graft library import {path} --model tiny-a --score-with tiny-a and the first "
        "import's other options --out NEW_LIBRARY; add the other sources to it with --append)"
    ) in message
    import_rollouts(spec(path, format="parquet", score_with="tiny-a"), tmp_path / "new")
    Trainer(dataclasses.replace(config, library=LibrarySpec(str(tmp_path / "new"))))


def test_missing_log_probs_are_scored_with_the_source_model(tmp_path, peer_runs):
    rows = [row for row in exported(peer_runs[0], logprobs=False) if row["step"] == 0]
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    summary = import_rollouts(spec(path, score_with="tiny-a"), tmp_path / "lib")
    assert (summary.rescored, summary.missing_logprobs) == (24, 0)
    build_library([peer_runs[0]], tmp_path / "built")
    built = by_prompt_and_step(read_library(tmp_path / "built"))
    for where, got in by_prompt_and_step(read_library(tmp_path / "lib")).items():
        # step 0 was sampled by the model as loaded: scoring it again gives its log-probs
        want = built[where]
        assert got.logprob_origins == ["rescored"] * 4
        assert got.token_ids == want.token_ids
        for a, b in zip(got.logprobs, want.logprobs, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-4)


def test_bad_files_are_one_line_errors_naming_the_row(tmp_path, peer_runs):
    rows = exported(peer_runs[0])[:4]
    path = tmp_path / "rollouts.jsonl"
    path.write_text(
        "".join(
            json.dumps({k: v for k, v in r.items() if k != "finish_reason"}) + "\n" for r in rows
        )
    )
    with pytest.raises(LibraryError, match=rf"{path}:1: no finish reason .*--finish-reason"):
        import_rollouts(spec(path), tmp_path / "lib")
    assert import_rollouts(spec(path, finish_reason="length"), tmp_path / "lib").groups == 1
    path.write_text(json.dumps({**rows[0], "logprobs": [-0.1, float("nan")]}) + "\n")
    with pytest.raises(LibraryError, match=rf"{path}:1: log-probs must be a non-empty list of"):
        import_rollouts(spec(path), tmp_path / "lib2")
    path.write_text(json.dumps({**rows[0], "completion": None}) + "\n")
    with pytest.raises(
        LibraryError, match=r":1: column 'completion' \(response\) must be a string"
    ):
        import_rollouts(spec(path), tmp_path / "lib2")
    path.write_text(json.dumps({**rows[0], "question": ""}) + "\n")
    with pytest.raises(
        LibraryError, match=r":1: column 'question' \(prompt\) must be a non-empty string"
    ):
        import_rollouts(spec(path), tmp_path / "lib2")
    with pytest.raises(LibraryError, match=r"unknown import format 'csv'; valid: jsonl, parquet"):
        import_rollouts(spec(path, format="csv"), tmp_path / "lib2")
    with pytest.raises(LibraryError, match=r"unknown column role\(s\) \['answer'\]"):
        import_rollouts(spec(path, columns={"answer": "x"}), tmp_path / "lib2")
    path.write_text(json.dumps({**rows[0], "question": "Not a problem of the set."}) + "\n")
    with pytest.raises(LibraryError, match=r"none of its 1 rows is a problem of procedural/train"):
        import_rollouts(spec(path), tmp_path / "lib2")


def test_graft_library_import(tmp_path, peer_runs, capsys):
    path = tmp_path / "rollouts.jsonl"
    path.write_text(
        "".join(json.dumps(row) + "\n" for row in exported(peer_runs[1], logprobs=False))
    )
    lib = tmp_path / "lib"
    argv = ["library", "import", str(path), "--model", "tiny-a", "--dataset", "procedural"]
    argv += ["--split", "train", "--dataset-option", "size=4", "--dataset-option", "difficulty=1"]
    argv += ["--column", "prompt=question", "--column", "response=completion", "--out", str(lib)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"wrote {lib / 'part-000000.parquet'}: 18 groups, 72 responses" in out
    assert "72 responses have no generation log-probs: marked 'missing'" in out
    assert "responses without log-probs" in out  # the summary counts them per source
    assert cli.main([*argv, "--append"]) == 2
    assert "already holds 18 of these groups" in capsys.readouterr().err


def test_a_new_format_is_one_reader(tmp_path, peer_runs, monkeypatch):
    """CONTRIBUTING's example: vLLM-style dumps, one row per prompt with its outputs."""
    from graft_env.data.files import read_jsonl

    def vllm_rows(path):
        return [
            (f"{path}:{line} output {i}", {**out, "prompt": row["prompt"], "group": line})
            for line, row in read_jsonl(path)
            for i, out in enumerate(row["outputs"])
        ]

    monkeypatch.setitem(importers.READERS, "vllm-jsonl", vllm_rows)
    rows = [r for r in exported(peer_runs[0]) if r["step"] == 1]
    dumps = [
        {
            "prompt": rows[j]["question"],
            "outputs": [
                {
                    "text": r["completion"],
                    "logprobs": r["logprobs"],
                    "finish_reason": r["finish_reason"],
                }
                for r in rows[j : j + 4]
            ],
        }
        for j in range(0, len(rows), 4)
    ]
    path = tmp_path / "dump.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in dumps))
    summary = import_rollouts(
        spec(path, format="vllm-jsonl", columns={"prompt": "prompt", "response": "text"}),
        tmp_path / "lib",
    )
    assert (summary.groups, summary.responses, summary.missing_logprobs) == (6, 24, 0)
    build_library([peer_runs[0]], tmp_path / "built")
    built = {(g.key, tuple(g.texts)): g for g in read_library(tmp_path / "built") if g.step == 1}
    for got in read_library(tmp_path / "lib"):
        want = built[(got.key, tuple(got.texts))]
        np.testing.assert_array_equal(got.rewards, want.rewards)
        assert got.step is None and got.finish_reasons == want.finish_reasons


def test_an_empty_response_imports_as_the_run_store_keeps_it(tmp_path, peer_runs):
    # a model may stop at once; build keeps such a response, and so does import
    rows = exported(peer_runs[0])[:4]
    rows[0] = {**rows[0], "completion": "", "logprobs": [-0.5], "token_ids": [2]}
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    import_rollouts(spec(path), tmp_path / "lib")
    [group] = read_library(tmp_path / "lib")
    assert group.texts[0] == "" and group.rewards[0] == 0.0


def test_scores_come_from_the_source_model_only(tmp_path, peer_runs, monkeypatch):
    def no_scoring(*args):
        raise AssertionError("a model scored the responses")

    monkeypatch.setattr(importers, "_score", no_scoring)
    path = tmp_path / "rollouts.jsonl"
    path.write_text(json.dumps(exported(peer_runs[0], logprobs=False)[0]) + "\n")
    # the library would say tiny-a while the log-probs and token ids were tiny-b's
    with pytest.raises(LibraryError) as error:
        import_rollouts(spec(path, score_with="tiny-b"), tmp_path / "lib")
    message = str(error.value)
    assert "\n" not in message
    assert (
        message.startswith("--score-with tiny-b: ") and "source model (--model tiny-a)" in message
    )
    with pytest.raises(LibraryError, match=r"--tokenizer tok: .*--score-with"):
        import_rollouts(spec(path, score_with="tiny-a", tokenizer="tok"), tmp_path / "lib")
    assert not (tmp_path / "lib").exists()


@pytest.mark.parametrize("format", ["jsonl", "parquet"])
def test_a_missing_file_is_named_as_the_file_to_import(tmp_path, format):
    path = tmp_path / f"nowhere.{format}"
    with pytest.raises(LibraryError) as error:
        import_rollouts(spec(path, format=format), tmp_path / "lib")
    assert str(error.value) == f"{path}: no such file to import"


def test_a_group_is_as_old_as_its_latest_response(tmp_path, peer_runs):
    rows = exported(peer_runs[0])[:8]  # two groups of step 0
    for i, row in enumerate(rows):
        row["time"] = 1000.0 + (7 - i if i < 4 else i)  # the first group's first row is latest
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    import_rollouts(spec(path), tmp_path / "lib")
    times = sorted(g.generated_at for g in read_library(tmp_path / "lib"))
    assert times == [1007.0, 1007.0]
