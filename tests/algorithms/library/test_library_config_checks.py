"""A graft-library run config whose library cannot serve it (missing, damaged, of other
problems, with a selection the library cannot take), or a stored-peer algorithm without its
source or with several agents, is a one-line error of `graft train` and `graft config
validate` before any model loads."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from library_runs import ENV, run_config

from algorithms.library.format import LibraryGroup, prompt_key, write_library
from algorithms.training.loop import Trainer
from algorithms.training.run_config import ConfigError
from benchmarks import cli
from graft_env.data import load


@pytest.fixture
def no_model_loads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model loaded before the library was checked")

    import algorithms.training.loop
    import graft_env.policies

    monkeypatch.setattr(algorithms.training.loop, "load_policy", refuse)
    monkeypatch.setattr(graft_env.policies, "load_policy", refuse)


def stored_group(problem: str, number: int = 0) -> LibraryGroup:
    return LibraryGroup(
        group_id=f"src#{number}", key=prompt_key(problem), problem=problem, dataset=None,
        prompt_id=None, source="src", agent=None, model_id="tiny-a", tokenizer_id="tiny-a",
        step=number, generated_at=1000.0, texts=["\\boxed{1}"] * 4, token_ids=[[1]] * 4,
        logprobs=[np.array([-0.5])] * 4, logprob_origins=["generation"] * 4,
        finish_reasons=["stop"] * 4, rewards=np.zeros(4), statuses=["ok"] * 4,
    )  # fmt: skip


def first_problem() -> str:
    return load(ENV["dataset"], ENV["split"], **ENV["dataset_options"])[0].problem


def libraries(root: Path) -> dict[str, Path]:
    """A good library for this prompt stream, one of other problems, a damaged one, an
    empty folder, and no library at all."""
    write_library([stored_group(first_problem())], root / "good", append=False)
    write_library([stored_group("Compute 1 + 1 in base 7.")], root / "other", append=False)
    part = write_library([stored_group(first_problem())], root / "damaged", append=False)
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x01
    part.write_bytes(bytes(data))
    (root / "empty").mkdir()
    return {name: root / name for name in ("good", "other", "damaged", "empty", "nowhere")}


BAD = [
    ("nowhere", [], r"library: {nowhere} is not a trajectory library \(no such directory\)"),
    ("empty", [], r"library: {empty}/_library.json is missing: {empty} is not a trajectory"),
    ("damaged", [], r"library: {damaged}/part-000000.parquet \(a library part\) does not match"),
    ("other", [], r"library: {other}: none of its 1 groups is usable by this run"),
    (
        "good",
        ["algorithm_options.selection=random_prompts"],
        r"library: selection='random_prompts' draws prompts without the gate",
    ),
    (
        "good",
        ["library=null"],
        r"algorithm: 'graft-library' \(stored=True\) needs stored_peer or library set",
    ),
    (
        "good",
        ["agents=[{name: tiny-b, model: tiny-b}, {name: tiny-a, model: tiny-a}]"],
        r"algorithm: 'graft-library' trains one receiver alone against a stored peer",
    ),
    ("good", ["algorithm=grpo"], r"algorithm: 'grpo' \(stored=False\) needs stored_peer or"),
]


def config_file(tmp_path: Path, library: Path) -> Path:
    config = run_config(
        tmp_path / "run", "graft-library", "tiny-b", 4, steps=1, library={"path": str(library)}
    )
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()))
    return path


@pytest.mark.parametrize(("library", "overrides", "message"), BAD)
@pytest.mark.parametrize("command", [["train", "--config"], ["config", "validate"]])
def test_an_unusable_library_is_one_line_before_any_model_loads(
    command, library, overrides, message, tmp_path, capsys, no_model_loads
):
    paths = libraries(tmp_path / "libs")
    config = config_file(tmp_path, paths[library])
    sets = [word for o in overrides for word in ("--set", o)]
    assert cli.main([*command, str(config), *sets]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    literal = {name: re.escape(str(path)) for name, path in paths.items()}
    expected = re.escape(f"graft {command[0]}: error: {config}: ") + message.format(**literal)
    assert re.match(expected, err), err
    assert not (tmp_path / "run").exists()


def test_a_usable_library_validates(tmp_path, capsys, no_model_loads):
    config = config_file(tmp_path, libraries(tmp_path / "libs")["good"])
    assert cli.main(["config", "validate", str(config)]) == 0
    assert "valid (graft-library, agents tiny-b" in capsys.readouterr().out


def test_a_trainer_built_in_python_checks_the_library_before_its_models(tmp_path, no_model_loads):
    paths = libraries(tmp_path / "libs")
    config = run_config(
        tmp_path / "run",
        "graft-library",
        "tiny-b",
        4,
        steps=1,
        library={"path": str(paths["other"])},
    )
    with pytest.raises(ValueError, match="none of its 1 groups is usable"):
        Trainer(config)
    with pytest.raises(ConfigError, match="needs stored_peer or library set"):
        run_config(tmp_path / "run", "graft-library", "tiny-b", 4, steps=1)
