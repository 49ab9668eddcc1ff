"""Result files (JSON, CSV, markdown, samples JSONL) and the `graft eval` command."""

from __future__ import annotations

import argparse
import csv
import json
import re

import pytest
import torch

from benchmarks.commands import eval as eval_command
from graft_env.data import load
from graft_env.eval import report
from graft_env.eval.evaluate import evaluate
from graft_env.rewards import STATUSES


def two_of_four(problem: int, call: int, sample: int) -> str:
    return "right" if sample < 2 else ("wrong" if problem == 0 else "none")


@pytest.fixture(scope="module")
def result(scripted, handmade, verifier):
    sets = {"one": handmade("one", ["1", "2"]), "two": handmade("two", ["3", "4", "5"])}
    policy = scripted([*sets["one"], *sets["two"]], two_of_four, name="scripted|pipe")
    return evaluate(policy, sets, k=4, repeats=2, seed=5, verifier=verifier)


def test_json_holds_config_provenance_and_counts(result, tmp_path):
    report.write_json(result, tmp_path / "results.json")
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["summary"] == pytest.approx(result.summary())
    assert data["config"]["seed"] == 5 and data["config"]["repeat_seeds"] == [5, 6]
    provenance = data["provenance"]
    assert set(provenance["versions"]) >= {"torch", "transformers", "math-verify"}
    assert provenance["versions"]["torch"] != "not installed"
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", provenance["git_commit"])
    # which kernels ran: the same seed and build key give other numbers on other CPUs
    assert provenance["machine"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert data["total_seconds"] > 0
    one = data["benchmarks"]["one"]
    assert one["successes"] == [[2, 2], [2, 2]]
    assert one["status_counts"]["no_answer"] == 2 * 2  # problem 1, samples 2-3, two repeats
    assert one["pass@1_per_repeat"] == [0.5, 0.5]
    assert data["average"]["pass@1"] == 0.5


def test_csv_has_one_row_per_benchmark_and_an_average(result, tmp_path):
    report.write_csv(result, tmp_path / "results.csv")
    with (tmp_path / "results.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["benchmark"] for row in rows] == ["one", "two", "average"]
    assert [int(row["n_problems"]) for row in rows] == [2, 3, 5]
    assert all(float(row["pass@1"]) == 0.5 for row in rows)
    assert all(row["seed"] == "5" and row["version_torch"] for row in rows)
    assert sum(int(rows[2][f"status_{s}"]) for s in STATUSES) == 5 * 4 * 2
    assert int(rows[2]["generated_tokens"]) == sum(int(r["generated_tokens"]) for r in rows[:2])


def test_markdown_table(result):
    text = report.render_markdown(result)
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert table[0] == "| benchmark | n problems | pass@1 (%, mean ± std) |"
    assert table[1:] == [
        "| one | 2 | 50.00 ± 0.00 |",
        "| two | 3 | 50.00 ± 0.00 |",
        "| average | 5 | 50.00 ± 0.00 |",
    ]
    assert "scripted\\|pipe" in text  # a pipe in a name cannot break the table
    assert "seeds [5, 6]" in text and result.provenance["git_commit"] in text


def run_eval(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="graft")
    eval_command.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", *argv])
    return args.func(args)


def test_graft_eval_writes_all_files(tiny_model_dir, data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--model", str(tiny_model_dir), "--datasets", "math500,aime24", "--limit", "2"]
    argv += ["--k", "2", "--max-new-tokens", "6", "--repeats", "2", "--seed", "3"]
    argv += ["--data-dir", str(data_dir), "--out", str(out), "--option", "generation_batch_size=4"]
    assert run_eval(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(eval_command.OUTPUT_FILES)
    data = json.loads((out / "results.json").read_text())
    assert data["config"]["model"] == str(tiny_model_dir)
    assert data["config"]["options"] == {"generation_batch_size": 4}
    assert data["config"]["source"] == "auto"  # read from the files: the data directory has them
    assert data["config"]["max_new_tokens"] == 6 and data["config"]["repeats"] == 2
    aime_ids = [p.id for p in load("aime24", data_dir=data_dir)[:2]]
    assert data["benchmarks"]["aime24"]["problem_ids"] == aime_ids
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 2 * 2 * 2
    assert set(samples[0]) >= {"problem_id", "sample_index", "repeat", "text", "extracted"}
    assert set(samples[0]) >= {"reward", "status", "finish_reason"}
    assert len(list(csv.DictReader((out / "results.csv").open()))) == 3
    assert "| average | 4 |" in (out / "results.md").read_text()
    assert "| average | 4 |" in capsys.readouterr().out


def test_graft_eval_rejects_bad_options(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="empty name"):
        run_eval(["--model", str(tiny_model_dir), "--datasets", "math500,,aime24"])
    with pytest.raises(ValueError, match=r"--option\.nope: unknown option; valid: temperature"):
        run_eval(["--model", str(tiny_model_dir), "--out", str(tmp_path), "--option", "nope=1"])


def test_default_out_dir_uses_the_model_name():
    assert str(eval_command.default_out_dir("tiny-a")) == "runs/eval/tiny-a"
    assert str(eval_command.default_out_dir("runs/x/step 10/")) == "runs/eval/step_10"
