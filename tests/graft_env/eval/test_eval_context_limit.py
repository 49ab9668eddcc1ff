"""Evaluation within a model's context limit, results kept when it stops, procedural sets
from the command line.

`graft eval --model tiny-a` used to fail with its default 4,096 new tokens (tiny-a has 512
positions); with 256 it sampled MATH500, then stopped on one longer prompt and wrote
nothing. Here a random-init model with 200 positions and the first four MATH500 problems
(prompts of 220, 274, 175 and 125 tokens under its tokenizer) stand in for that.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from algorithms.training.periodic_eval import eval_sets
from benchmarks import cli
from benchmarks.commands import eval as eval_command
from graft_env.data import load
from graft_env.eval.evaluate import evaluate, new_token_budgets
from graft_env.policies import HFPolicy
from graft_env.policies.tiny.models import TinyShape, build_model

POSITIONS = 200


@pytest.fixture(scope="module")
def short_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The harness tests' tiny model (same tokenizer), with 200 positions."""
    directory = tmp_path_factory.mktemp("short-context-model")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    shape = TinyShape(hidden=32, layers=2, heads=2, max_positions=POSITIONS)
    model = build_model(
        "llama", len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id, shape, seed=3
    )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def short_policy(short_model_dir: Path) -> HFPolicy:
    return HFPolicy(short_model_dir)


@pytest.fixture(scope="module")
def math500(data_dir: Path):
    return load("math500", data_dir=data_dir)[:4]


def test_budgets_are_what_the_positions_leave():
    assert new_token_budgets([10, 150, 199, 200, 300], 200, 64) == [64, 50, 1, 0, 0]


def test_each_response_gets_what_its_prompt_leaves_and_longer_prompts_are_skipped(
    short_policy, math500, verifier, capsys
):
    result = evaluate(
        short_policy,
        {"math500": math500},
        k=2,
        temperature=1.0,
        top_p=1.0,
        verifier=verifier,
        progress=True,
    )  # the default 4,096 new tokens
    bench = result.benchmarks["math500"]
    assert bench.problem_ids == [p.id for p in math500[2:]]
    assert bench.skipped == [p.id for p in math500[:2]]
    assert result.summary()["math500/n_skipped"] == 2
    assert result.summary()["math500/n_problems"] == 2
    assert result.config["max_positions"] == POSITIONS and result.config["complete"]
    lengths = {
        p.id: len(short_policy.encode_prompt(short_policy.format_prompt(p.problem)))
        for p in math500
    }
    assert [lengths[p.id] for p in math500] == [220, 274, 175, 125]
    for sample in result.samples:
        room = POSITIONS - lengths[sample.problem_id]
        assert sample.num_tokens <= room
        assert sample.finish_reason == "stop" or sample.num_tokens == room
    assert any(sample.finish_reason == "length" for sample in result.samples)
    assert capsys.readouterr().err.splitlines()[0] == (
        f"[eval] math500: {short_policy.name!r} has 200 positions: 2 of 4 prompts leave room "
        "for fewer than 4096 new tokens and get what fits (25-75); 2 of 4 leave none and are "
        "skipped (not in pass@1)"
    )


def test_a_set_without_a_prompt_that_fits_is_an_error_before_sampling(
    short_policy, math500, verifier
):
    with pytest.raises(ValueError, match=r"^evaluate: every 'math500' prompt is too long for "):
        evaluate(short_policy, {"math500": math500[:2]}, k=1, verifier=verifier)


def test_budgets_the_limit_does_not_cut_sample_as_before(scripted, handmade, verifier):
    """A policy with positions to spare: one generate call per batch, the same seeds."""
    problems = handmade("roomy", ["1", "2", "3"])

    class Roomy(scripted):
        max_positions = 10_000

        def encode_prompt(self, prompt):
            return list(prompt.encode())

    roomy, plain = Roomy(problems, lambda *_: "right"), scripted(problems, lambda *_: "right")
    first = evaluate(roomy, {"roomy": problems}, k=2, batch_size=2, verifier=verifier)
    second = evaluate(plain, {"roomy": problems}, k=2, batch_size=2, verifier=verifier)
    assert roomy.seeds == plain.seeds and len(roomy.seeds) == 2
    assert first.samples == second.samples and first.config["max_positions"] == 10_000


def _fake_model(monkeypatch, policy) -> None:
    import graft_env.policies

    monkeypatch.setattr(graft_env.policies, "load_policy", lambda *args, **kwargs: policy)


def test_an_interrupted_graft_eval_keeps_what_finished(
    scripted, data_dir, tmp_path, capsys, monkeypatch
):
    aime = load("aime24", data_dir=data_dir)[:5]

    class Interrupted(scripted):
        def generate(self, prompts, n, sampling):
            if len(self.seeds) == 2:  # the third batch: Ctrl-C
                raise KeyboardInterrupt
            return super().generate(prompts, n, sampling)

    _fake_model(monkeypatch, Interrupted(aime, lambda p, call, s: "right" if s else "wrong"))
    out = tmp_path / "out"
    (out / "results.md").parent.mkdir()
    (out / "results.md").write_text("an earlier run's table")
    argv = ["eval", "--model", "x", "--datasets", "aime24", "--limit", "5", "--k", "2"]
    argv += ["--batch-size", "2", "--data-dir", str(data_dir), "--out", str(out)]
    assert cli.main(argv) == 130
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["complete"] is False
    assert results["benchmarks"]["aime24"]["problem_ids"] == [p.id for p in aime[:4]]
    assert results["summary"]["aime24/pass@1"] == 0.5
    samples = (out / "samples.jsonl").read_text().splitlines()
    assert [json.loads(line)["problem_id"] for line in samples[::2]] == [p.id for p in aime[:4]]
    assert "Partial: the evaluation stopped" in (out / "results.md").read_text()
    assert capsys.readouterr().err.splitlines()[-2:] == [
        f"graft eval: kept the 4 problems finished in every repeat in {out / 'results.json'} "
        f"and the 8 samples verified so far in {out / 'samples.jsonl'}",
        "graft eval: interrupted",
    ]


@pytest.mark.parametrize(
    ("stop_at", "kept", "samples_only"),
    [
        (4, "kept the 2 problems finished in every repeat in {json} and the 14 samples", 3),
        (3, "no problem finished every repeat; kept the 10 samples", 5),
    ],
    ids=["in repeat 2's second batch", "before repeat 2's first batch"],
)
def test_an_interrupted_graft_eval_with_repeats_says_what_only_the_samples_hold(
    stop_at, kept, samples_only, scripted, data_dir, tmp_path, capsys, monkeypatch
):
    """Repeat 1 finished all 5 problems; what repeat 2 has not reached is left out of the
    table (problems finished in every repeat), and the message says so exactly."""
    aime = load("aime24", data_dir=data_dir)[:5]

    class Interrupted(scripted):
        def generate(self, prompts, n, sampling):
            if len(self.seeds) == stop_at:  # 3 batches of 2, 2, 1 problems per repeat
                raise KeyboardInterrupt
            return super().generate(prompts, n, sampling)

    _fake_model(monkeypatch, Interrupted(aime, lambda *_: "right"))
    out = tmp_path / "out"
    argv = ["eval", "--model", "x", "--datasets", "aime24", "--limit", "5", "--k", "2"]
    argv += ["--repeats", "2", "--batch-size", "2", "--data-dir", str(data_dir)]
    assert cli.main([*argv, "--out", str(out)]) == 130
    where = f"aime24 repeat 1/2: {samples_only} problems"
    message = kept.format(json=out / "results.json")
    assert capsys.readouterr().err.splitlines()[-2:] == [
        f"graft eval: {message} verified so far in {out / 'samples.jsonl'}; only in the "
        f"samples (not finished in every repeat): {where}",
        "graft eval: interrupted",
    ]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert sum(s["repeat"] == 0 for s in samples) == 5 * 2  # repeat 1 was finished
    if stop_at == 4:
        assert f"only in samples.jsonl: {where}." in (out / "results.md").read_text()


def test_procedural_sets_are_reachable_from_graft_eval(scripted, tmp_path, capsys, monkeypatch):
    home = eval_sets(["procedural/addition"], None, 4, {"difficulty": 1})["procedural/addition"]
    _fake_model(monkeypatch, scripted(home, lambda *_: "right"))
    out = tmp_path / "out"
    argv = ["eval", "--model", "x", "--datasets", "procedural/addition", "--limit", "4"]
    argv += ["--procedural", "difficulty=1", "--k", "2", "--out", str(out)]
    assert cli.main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["benchmarks"]["procedural/addition"]["problem_ids"] == [p.id for p in home]
    golds = [json.loads(line)["gold"] for line in (out / "samples.jsonl").read_text().splitlines()]
    assert golds[::2] == [p.answer for p in home]
    assert results["summary"]["average/pass@1"] == 1.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--datasets", "procedural/addition", "--procedural", "difficulty=9"],
            "difficulty must be a level in [1, 2, 3, 4, 5]",
        ),
        (
            ["--datasets", "math500", "--procedural", "difficulty=1"],
            "--procedural is set but --datasets names no procedural/<skill> set",
        ),
    ],
)
def test_bad_procedural_options_are_one_line_before_the_model_loads(
    argv, message, tmp_path, capsys, monkeypatch
):
    def refuse(*args, **kwargs):
        raise AssertionError("a model loaded before the input was checked")

    monkeypatch.setattr("graft_env.policies.load_policy", refuse)
    assert cli.main(["eval", "--model", "tiny-a", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graft eval: error: ") and message in err


def test_graft_eval_with_the_default_budget_on_a_short_model(
    short_model_dir, data_dir, tmp_path, capsys
):
    out = tmp_path / "out"
    argv = ["eval", "--model", str(short_model_dir), "--datasets", "math500", "--limit", "4"]
    argv += ["--k", "1", "--data-dir", str(data_dir), "--out", str(out)]
    assert cli.main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["summary"]["math500/n_skipped"] == 2 and results["config"]["complete"]
    captured = capsys.readouterr()
    assert "2 of 4 leave none and are skipped (not in pass@1)" in captured.err
    note = "positions; not in n problems or pass@1): math500 2."
    assert note in captured.out and note in (out / "results.md").read_text()
    assert sorted(p.name for p in out.iterdir()) == sorted(eval_command.OUTPUT_FILES)
