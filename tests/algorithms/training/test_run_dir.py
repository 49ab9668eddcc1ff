"""Run directories: every mistake about one (a file, not writable, another run's settings, no
usable checkpoint) is refused before any model loads, in one line naming `run_dir`;
`--fresh` deletes only a run directory and only once the whole config is valid; `--restart`
keeps the earlier files; a resume compares only the settings that change results and names
each one that differs; the store is checked on resume; a run records its resolved config
and its log there."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from run_configs import small_config

from algorithms.training import loop
from algorithms.training.loop import Trainer
from algorithms.training.run_config import ConfigError, result_differences
from algorithms.training.run_dir import MARKER, RESOLVED_CONFIG, RUN_LOG
from benchmarks import cli


def _config_file(tmp_path: Path, run_dir: Path, **extra) -> Path:
    path = tmp_path / f"{run_dir.name}.yaml"
    path.write_text(yaml.safe_dump(small_config(run_dir, "graft", **extra).to_dict()))
    return path


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def _one_error_line(capsys, models_loaded: bool = False) -> str:
    """The error line; alone on stderr unless models loaded (transformers' bars precede it)."""
    err = capsys.readouterr().err
    last = err.rstrip("\n").split("\n")[-1]
    assert last.startswith("graft train: error: ") and "Traceback" not in err, err
    assert models_loaded or err == last + "\n", err
    return last


def test_fresh_refuses_what_is_not_a_run_directory(tmp_path, capsys):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ideas.txt").write_text("keep me")
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me too")
    config = _config_file(tmp_path, tmp_path / "run", steps=1)
    for target, why in ((notes, f"it has no {MARKER}"), (a_file, "it is not a directory")):
        args = ["train", "--config", str(config), "--fresh", "--set", f"run_dir={target}"]
        assert cli.main(args) == 2
        assert f"--fresh will not delete {target}: {why}" in _one_error_line(capsys)
    assert (notes / "ideas.txt").read_text() == "keep me"
    assert a_file.read_text() == "keep me too"


def test_fresh_deletes_a_run_directory_only_once_the_whole_config_is_valid(
    tmp_path, capsys, tiny_pair_paths
):
    run_dir = tmp_path / "run"
    config = _config_file(tmp_path, run_dir, steps=1)
    assert cli.main(["train", "--config", str(config)]) == 0
    summary = capsys.readouterr().out  # the run's own output ends with the summary
    assert f"graft eval --model {run_dir / 'checkpoints'}" in summary
    assert "reward " in summary and "(step 0); last step" in summary  # one step: one end
    log = (run_dir / RUN_LOG).read_text()  # the steps and the summary the terminal showed
    assert "step 1/1  tiny-a r=" in log and f"graft eval --model {run_dir / 'checkpoints'}" in log
    assert (run_dir / MARKER).is_file()
    (run_dir / "stale.txt").write_text("from an earlier run")
    before = _files(run_dir)
    # A typo that only the algorithm registry catches (it checks its options).
    typo = ["--set", "algorithm_options.deltaa=0.5"]
    assert cli.main(["train", "--config", str(config), "--fresh", *typo]) == 2
    assert "deltaa" in _one_error_line(capsys, models_loaded=True)
    assert _files(run_dir) == before
    assert cli.main(["train", "--config", str(config), "--fresh"]) == 0
    assert not (run_dir / "stale.txt").exists() and (run_dir / MARKER).is_file()
    rows = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["step"] for row in rows] == [0, 0]


def test_a_resume_over_a_damaged_store_is_one_line_naming_file_and_step(
    tmp_path, capsys, tiny_pair_paths
):
    run_dir = tmp_path / "run"
    assert cli.main(["train", "--config", str(_config_file(tmp_path, run_dir, steps=1))]) == 0
    capsys.readouterr()
    stored = run_dir / "trajectories" / "step_000000" / "tiny-a.parquet"
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 4
    stored.write_bytes(bytes(data))
    assert cli.main(["train", "--config", str(_config_file(tmp_path, run_dir, steps=2))]) == 2
    error = _one_error_line(capsys)  # alone: checked before the models load
    assert f"{stored} (step 0) does not match its SHA-256" in error


def _another_runs_dir(tmp_path: Path) -> Path:
    """A run directory whose recorded step was computed with seed 3 (the tests' runs use 0)."""
    run_dir = tmp_path / "other"
    run_dir.mkdir()
    other = small_config(run_dir, "graft", seed=3).to_dict()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(other))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 0, "agent": "tiny-a"}) + "\n")
    return run_dir


def _no_usable_checkpoint(tmp_path: Path) -> Path:
    """A run directory whose only checkpoint has lost its manifest."""
    run_dir = tmp_path / "corrupt"
    (run_dir / "checkpoints" / "step_000001").mkdir(parents=True)
    return run_dir


def test_every_run_dir_mistake_is_refused_before_any_model_loads(tmp_path, capsys, monkeypatch):
    """Each refusal comes from the run directory's checks, which run before the policies are
    made: `make_policies` (which would build an uncached pair, minutes) raising here proves
    the order whatever the model cache holds."""

    def no_models(config):
        raise AssertionError("the models were made before the run directory was checked")

    monkeypatch.setattr(loop, "make_policies", no_models)
    monkeypatch.setenv("GRAFT_CACHE_DIR", str(tmp_path / "empty-cache"))
    a_file = tmp_path / "a_file"
    a_file.write_text("not a run")
    config = _config_file(tmp_path, tmp_path / "run", steps=1)
    cases = [
        (a_file, [], f"run_dir: {a_file} is a file, not a directory"),
        (a_file / "run", [], f"run_dir: {a_file} is a file, not a directory (run_dir {a_file}"),
        # procfs takes no new files, for root too (whom permissions do not stop)
        (Path("/proc/graft-run"), [], "run_dir: cannot write in /proc ("),
        (_another_runs_dir(tmp_path), [], "settings differ in what changes results"),
        (_no_usable_checkpoint(tmp_path), [], "has checkpoints but none is usable"),
        (a_file, ["--fresh"], f"run_dir: --fresh will not delete {a_file}"),
    ]
    for run_dir, flags, expected in cases:
        args = ["train", "--config", str(config), *flags, "--set", f"run_dir={run_dir}"]
        assert cli.main(args) == 2, run_dir
        # alone on stderr, but for the unusable checkpoint's warning before it
        line = _one_error_line(capsys, models_loaded="none is usable" in expected)
        assert line.startswith("graft train: error: run_dir: ") and expected in line, line
    assert "seed: 3 -> 0" in _refusal(tmp_path, "other", config, capsys)
    assert "--restart" in _refusal(tmp_path, "corrupt", config, capsys)


def _refusal(tmp_path: Path, name: str, config: Path, capsys) -> str:
    args = ["train", "--config", str(config), "--set", f"run_dir={tmp_path / name}"]
    assert cli.main(args) == 2
    return _one_error_line(capsys, models_loaded=True)


def test_restart_keeps_the_earlier_files_when_every_checkpoint_is_unusable(
    tmp_path, fresh_policies, caplog
):
    run_dir = tmp_path / "run"
    config = small_config(run_dir, "graft", steps=2)
    Trainer(config, policies=fresh_policies("tiny-a", "tiny-b")).train()
    metrics = (run_dir / "metrics.jsonl").read_text()
    earlier_config = (run_dir / "config.yaml").read_text()
    for checkpoint in (run_dir / "checkpoints").glob("step_*"):
        (checkpoint / "MANIFEST.json").unlink()
    longer = small_config(run_dir, "graft", steps=3)  # a change a resume may make
    with pytest.raises(ConfigError, match=r"none is usable.*--restart"):
        Trainer(longer, policies=fresh_policies("tiny-a", "tiny-b"))
    command = ["train", "--config", str(_config_file(tmp_path, run_dir, steps=3)), "--restart"]
    with caplog.at_level(logging.WARNING, logger="algorithms.training.loop"):
        assert cli.main(command) == 0
    [kept] = run_dir.glob("earlier-*")
    [warning] = [r.getMessage() for r in caplog.records if "starts over" in r.getMessage()]
    assert "from step 0" in warning and str(kept) in warning and "\n" not in warning
    assert (kept / "metrics.jsonl").read_text() == metrics
    assert sorted(p.name for p in (kept / "checkpoints").iterdir()) == [
        "step_000001",
        "step_000002",
    ]
    assert (kept / "trajectories" / "step_000001" / "tiny-b.parquet").is_file()
    assert (kept / "config.yaml").read_text() == earlier_config  # the settings of its files
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["steps"] == 3
    rows = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["step"] for row in rows] == [0, 0, 1, 1, 2, 2]  # from step 0


def test_restart_moves_nothing_out_of_a_folder_no_graft_run_made(tmp_path):
    """--restart sets files aside only in a run directory (its marker) or an empty one: in a
    folder of the user's own it is refused before anything moves."""
    from algorithms.training.run_dir import set_aside

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"^run_dir: --restart will not move the files of"):
        set_aside(notes)
    assert sorted(p.name for p in notes.iterdir()) == ["todo.txt"]


def test_a_run_records_its_resolved_config_and_its_log(tmp_path, fresh_policies):
    """resolved_config.yaml holds the preset's and the defaults' values beside what was
    written; run.log the run's log records, Python warnings, a line per step; TensorBoard
    gets the resolved config as hparams."""
    run_dir = tmp_path / "run"
    config = small_config(run_dir, "graft", steps=1, tensorboard=True, options={"delta": 0.5})

    def warn(record):
        import warnings

        warnings.warn("a warning raised during the run", UserWarning, stacklevel=1)

    Trainer(config, policies=fresh_policies("tiny-a", "tiny-b")).train(on_step=warn)
    resolved = yaml.safe_load((run_dir / RESOLVED_CONFIG).read_text())
    options = resolved["algorithm_options"]
    assert options["delta"] == 0.5 and options["n"] == 4  # as written
    assert options["eps_high"] == 0.28 and options["adv_ddof"] == 1  # the graft preset's
    assert resolved["agents"][0]["options"]["weight_decay"] == 0.01  # a policy default
    assert "vllm_kv_cache_gib" not in resolved["agents"][0]["options"]  # not a vLLM agent
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["algorithm_options"] == {
        "n": 4,
        "num_minibatches": 2,
        "delta": 0.5,
    }
    text = (run_dir / RUN_LOG).read_text()
    assert "step 1/1  tiny-a r=" in text
    assert "WARNING py.warnings" in text and "a warning raised during the run" in text
    events = b"".join(p.read_bytes() for p in (run_dir / "tb" / "tiny-a").glob("events.*"))
    assert b"_hparams_/session_start_info" in events and b"algorithm_options.eps_high" in events
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import plugin_data_pb2

    columns = [
        info.name.tag
        for path in (run_dir / "tb" / "tiny-a").glob("events.*")
        for event in EventFileLoader(str(path)).Load()
        for value in event.summary.value
        if value.tag == "_hparams_/experiment"
        for info in plugin_data_pb2.HParamsPluginData.FromString(
            value.metadata.plugin_data.content
        ).experiment.metric_infos
    ]
    assert columns == ["reward_mean", "eval/average/pass@1"]  # the HParams tab's metric columns


def test_a_resume_names_every_setting_that_differs_with_both_values(tmp_path, fresh_policies):
    run_dir = tmp_path / "run"
    Trainer(
        small_config(run_dir, "graft", steps=1), policies=fresh_policies("tiny-a", "tiny-b")
    ).train()
    other = small_config(run_dir, "graft", steps=1, seed=3, sampling={"max_new_tokens": 32})
    with pytest.raises(ConfigError) as caught:
        Trainer(other, policies=fresh_policies("tiny-a", "tiny-b")).open()
    message = str(caught.value)
    assert "seed: 0 -> 3" in message and "sampling.max_new_tokens: 64 -> 32" in message
    assert "\n" not in message and str(run_dir) in message


def test_a_first_attempt_that_stopped_before_step_0_does_not_block_its_directory(
    tmp_path, fresh_policies
):
    run_dir = tmp_path / "run"
    Trainer(
        small_config(run_dir, "graft", steps=1), policies=fresh_policies("tiny-a", "tiny-b")
    ).open()
    fixed = small_config(run_dir, "grpo", agents=("tiny-a",), steps=1)
    trainer = Trainer(fixed, policies=fresh_policies("tiny-a"))
    trainer.open()
    assert trainer.step == 0
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["algorithm"] == "grpo"


def test_a_resume_with_another_thread_count_warns_that_it_is_not_exact(
    tmp_path, fresh_policies, caplog
):
    run_dir = tmp_path / "run"
    Trainer(
        small_config(run_dir, "graft", steps=1), policies=fresh_policies("tiny-a", "tiny-b")
    ).train()
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        trainer = Trainer(
            small_config(run_dir, "graft", steps=2), policies=fresh_policies("tiny-a", "tiny-b")
        )
        with caplog.at_level(logging.WARNING, logger="algorithms.training.loop"):
            trainer.open()
    finally:
        torch.set_num_threads(before)
    assert trainer.step == 1
    [warning] = [r.getMessage() for r in caplog.records if "torch thread" in r.getMessage()]
    assert "written with 1 torch thread" in warning and "resumes with 2" in warning


# Settings a resume may change: where the run lives, how far it goes, how it checkpoints
# and reports, Ray placement, threads (warned about instead).
FREE = ("run_dir", "steps", "checkpoint_every", "keep_checkpoints", "progress", "tensorboard")
BASE = small_config(Path("runs/x"), "graft").to_dict()


@settings(deadline=None)  # the 2 shared cores stall a call now and then
@given(
    st.dictionaries(
        st.sampled_from(FREE), st.one_of(st.integers(1, 9), st.booleans(), st.text(max_size=5))
    )
)
def test_settings_that_do_not_change_results_may_differ(changes):
    assert result_differences(BASE, {**BASE, **changes}) == []


@settings(deadline=None)  # the 2 shared cores stall a call now and then
@given(
    st.sampled_from(
        ["seed", "algorithm", "env.batch_size", "agents.1.options.lr", "sampling.top_p"]
    ),
    st.integers(100, 200),
)
def test_every_setting_that_changes_results_is_named_with_both_values(key, value):
    ours = json.loads(json.dumps(BASE))
    node = ours
    *parents, last = key.split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    before = repr(node[last]) if last in node else "(unset)"
    node[last] = value
    assert result_differences(BASE, ours) == [f"{key}: {before} -> {value!r}"]


def test_eval_settings_change_results_only_when_evaluation_runs():
    """A run with `eval.every: 0` never evaluates: its eval settings (whose defaults may
    move, as the token cap moved from 512 to SPEC §10's 4,096) do not block a resume."""
    old = json.loads(json.dumps(BASE))
    old["eval"] = {**old["eval"], "max_new_tokens": 512, "k": 4}
    assert result_differences(old, BASE) == []
    evaluating = [json.loads(json.dumps(d)) for d in (old, BASE)]
    for data in evaluating:
        data["eval"].update(every=2, datasets=["procedural/addition"])
    assert result_differences(*evaluating) == [
        "eval.k: 4 -> 8",
        "eval.max_new_tokens: 512 -> 4096",
    ]
