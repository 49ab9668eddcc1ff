"""Every mistake a user can make on the command line is one line, `graft <cmd>: error: ...`,
with exit status 2, found before any model loads; Ctrl-C says where to resume (exit 130)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from run_configs import small_config

from benchmarks import cli
from benchmarks.commands import compare as compare_command
from benchmarks.commands import train as train_command

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any model load fails the test: validation must come first."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model loaded before the input was checked")

    import algorithms.training.loop
    import graft_env.policies

    monkeypatch.setattr(algorithms.training.loop, "load_policy", refuse)
    monkeypatch.setattr(graft_env.policies, "load_policy", refuse)


def _config_file(tmp_path: Path, text: str | None = None) -> Path:
    path = tmp_path / "run.yaml"
    data = small_config(tmp_path / "run", "graft").to_dict()
    path.write_text(yaml.safe_dump(data) if text is None else text)
    return path


def _one_error_line(capsys, command: str) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"graft {command}: error: "), captured.err
    return captured.err


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["steps=ten"], "steps: 'ten' is not an integer"),
        (["env.batch_size=abc"], "env.batch_size: 'abc' is not an integer"),
        (["env.batch_size=2.5"], "env.batch_size: 2.5 is not an integer"),
        (["agents.0.options.lrr=1e-5"], "agents.0.options.lrr: unknown option; valid: "),
        (["seed=-1"], "seed: -1 must be >= 0"),
        (["agents.0.options.lr=-1"], "agents.0.options.lr: -1 must be >= 0"),
        (["env.dataset=math5000"], "env.dataset: unknown dataset 'math5000'; valid: "),
        (
            ["algorithm=grpoo"],
            "algorithm: unknown algorithm 'grpoo'; did you mean 'grpo' or 'grpo-kl'?; valid: ",
        ),
        (["env.batch_size=[4"], "--set env.batch_size: YAML syntax error: "),
    ],
)
def test_bad_overrides_are_one_line_before_any_model_loads(
    overrides, message, tmp_path, capsys, no_model_loads
):
    config = _config_file(tmp_path)
    sets = [word for o in overrides for word in ("--set", o)]
    assert cli.main(["train", "--config", str(config), *sets]) == 2
    assert message in _one_error_line(capsys, "train")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("steps: 3\nenv: {batch_size: 4\n", "run.yaml:3:1: YAML syntax error: "),
        ("steps: 3\nenv:\n\tbatch_size: 4\n", "(YAML indents with spaces, not tabs)"),
        ("- steps: 3\n", "run.yaml: expected a mapping at the top level, got a list"),
    ],
)
def test_broken_yaml_is_one_line_naming_file_and_line(
    text, message, tmp_path, capsys, no_model_loads
):
    assert cli.main(["train", "--config", str(_config_file(tmp_path, text))]) == 2
    error = _one_error_line(capsys, "train")
    assert message in error and "<unicode string>" not in error


def test_a_directory_is_not_a_config(tmp_path, capsys, no_model_loads):
    assert cli.main(["train", "--config", str(tmp_path)]) == 2
    assert "is a directory, not a YAML file" in _one_error_line(capsys, "train")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--datasets", "math5000"], "unknown dataset 'math5000'; available datasets: "),
        (["--datasets", "gsm8k", "--data-dir", "/nowhere"], "'/nowhere' (from data_dir) does"),
        (["--option", "lrr=1"], "--option.lrr: unknown option; valid: "),
    ],
)
def test_eval_checks_its_sets_and_options_before_the_model_loads(
    argv, message, tmp_path, capsys, no_model_loads
):
    out = ["--out", str(tmp_path / "out")]
    assert cli.main(["eval", "--model", "tiny-a", *out, *argv]) == 2
    assert message in _one_error_line(capsys, "eval")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--k", "0"], "argument --k: 0 must be >= 1"),
        (["--limit", "0"], "argument --limit: 0 must be >= 1"),
        (["--limit", "ten"], "argument --limit: 'ten' is not an integer"),
    ],
)
def test_eval_numbers_are_checked_by_the_parser(argv, message, capsys, no_model_loads):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["eval", "--model", "tiny-a", *argv])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"graft eval: error: {message}"


def test_ctrl_c_is_one_line_saying_where_to_resume(tmp_path, capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_command, "run", interrupted)
    config = _config_file(tmp_path)
    assert cli.main(["train", "--config", str(config)]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err == (
        "graft train: interrupted; rerun the same command to resume from the newest "
        f"checkpoint in {tmp_path / 'run'}\n"
    )


def test_a_retired_command_is_one_line_saying_what_to_use_instead(capsys):
    assert cli.main(["plan", "configs/paper_smollm3_qwen3.yaml", "--gpus", "4"]) == 2
    assert "accelerate estimate-memory <model>" in _one_error_line(capsys, "plan")


def test_config_validate_and_show(tmp_path, capsys):
    assert cli.main(["config", "validate", str(REPO / "configs" / "tiny_pair_graft.yaml")]) == 0
    assert "valid (graft, agents tiny-a, tiny-b, 20 steps" in capsys.readouterr().out
    grid = REPO / "configs" / "grids" / "compare_tiny.yaml"
    assert cli.main(["config", "validate", "--grid", str(grid)]) == 0
    assert "valid grid 'compare_tiny'" in capsys.readouterr().out
    assert cli.main(["config", "validate", str(_config_file(tmp_path)), "--set", "seed=-1"]) == 2
    assert "seed: -1 must be >= 0" in _one_error_line(capsys, "config")
    assert cli.main(["config", "show", "--format", "lines"]) == 0
    shown = capsys.readouterr().out.splitlines()
    batch = next(line for line in shown if line.startswith("env.batch_size "))
    assert "int >= 1" in batch and "default 8" in batch and "prompts per step" in batch
    assert cli.main(["config", "show", "--grid", "--format", "lines"]) == 0
    shown_grid = capsys.readouterr().out.splitlines()
    assert any(line.startswith("eval.k ") for line in shown_grid)
    for line in shown + shown_grid:  # key, type, default, help: every key says what it is for
        columns = re.split(r"\s{2,}", line.strip())
        assert len(columns) == 4 and len(columns[3]) > 5, line


def test_train_help_fits_the_terminal_and_points_to_config_show(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to it
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    out = capsys.readouterr().out
    assert "graft config show" in out and "--set KEY=VALUE" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_the_compare_default_grid_exists():
    assert Path(compare_command.DEFAULT_GRID).is_file()


def test_graft_help_loads_no_torch():
    """`graft --help`, every subcommand's `--help`, `graft config show`, `graft data list`,
    `graft config validate` and a `graft train` whose config is refused never import torch
    or transformers (seconds on these cores)."""
    config = str(REPO / "configs" / "tiny_pair_graft.yaml")
    helps = "['--help'], ['data', '--help'], ['eval', '--help'], ['compare', '--help'], "
    helps += "['train', '--help'], ['config', 'show'], ['config', 'show', '--grid']"
    code = (
        "import sys\nfrom benchmarks import cli\n"
        f"for argv in ({helps}):\n"
        "    try:\n        cli.main(argv)\n    except SystemExit:\n        pass\n"
        "cli.main(['data', 'list'])\n"
        f"assert cli.main(['config', 'validate', {config!r}]) == 0\n"
        f"bad = ['train', '--config', {config!r}, '--set', 'agents.0.options.lrr=1']\n"
        "assert cli.main(bad) == 2\n"
        "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "procedural" in done.stdout and "compare" in done.stdout
    assert "valid (graft, agents tiny-a, tiny-b" in done.stdout
    assert "agents.0.options.lrr: unknown option; valid: temperature, dtype" in done.stderr


def test_a_closed_pipe_is_not_an_error():
    """`graft config show --grid | head -1`: the reader stops early; graft says nothing."""
    code = "from benchmarks import cli\nraise SystemExit(cli.main(['config', 'show', '--grid']))"
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    child.stdout.close()  # before the child writes: its output meets a closed pipe
    assert child.wait(timeout=60) == 0
    assert child.stderr.read() == b""


def test_the_default_train_config_is_the_testbed_study_in_miniature(capsys):
    # the shipped copy (package data, what a wheel carries) is the checkout's configs/ file
    assert train_command.DEFAULT_CONFIG.resolve() == REPO / "configs" / "testbed_pair_graft.yaml"
    assert cli.main(["config", "validate", str(train_command.DEFAULT_CONFIG)]) == 0
    assert "valid (graft, agents testbed-a, testbed-b, 96 steps" in capsys.readouterr().out
    assert cli.main(["config", "validate", "--grid", str(REPO / "configs/grids/study.yaml")]) == 0
