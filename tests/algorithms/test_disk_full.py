"""A full disk while a checkpoint or a store file is written: one line naming the path, and
nothing half-written left behind as if it were complete.

The writers are made to fail as they do on a full file system (measured on a 300 KB
tmpfs: safetensors raises `SafetensorError("Error while serializing: I/O error: No space
left on device (os error 28)")`, `torch.save` a `RuntimeError` that says nothing of the
disk, a plain file write `OSError(28)` without a file name), after writing part of a file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers.modeling_utils
from run_configs import small_config
from safetensors import SafetensorError

import algorithms.storage.store
from algorithms.storage.store import TrajectoryStore
from algorithms.training.checkpoint import latest_checkpoint, save_checkpoint
from algorithms.training.metrics import MetricsLog
from benchmarks import cli
from graft_env.policies import load_policy
from graft_env.types import AgentRollouts

FULL = "No space left on device"
SAFETENSORS_FULL = SafetensorError(f"Error while serializing: I/O error: {FULL} (os error 28)")
TORCH_FULL = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")


def _partial_then(error: BaseException, path_arg: int):
    """A writer that leaves part of its file behind, then fails as a full disk makes it."""

    def write(*args, **kwargs):
        Path(args[path_arg]).write_bytes(b"\0" * 100)
        raise error

    return write


WRITERS = {
    "weights (safetensors)": (
        transformers.modeling_utils,
        "safe_save_file",
        _partial_then(SAFETENSORS_FULL, 1),
    ),
    "optimizer (torch.save)": (
        torch,
        "save",
        _partial_then(TORCH_FULL, 1),
    ),
}


@pytest.fixture(scope="module")
def policies():
    return {name: load_policy(name) for name in ("tiny-a", "tiny-b")}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_checkpoint_that_cannot_be_written_is_an_error_naming_it_and_leaves_the_last_one(
    writer, tmp_path, policies, monkeypatch
):
    root = tmp_path / "checkpoints"
    first = save_checkpoint(root, 1, policies, {"step": 1})
    module, name, failing = WRITERS[writer]
    monkeypatch.setattr(module, name, failing)
    with pytest.raises(OSError) as caught:
        save_checkpoint(root, 2, policies, {"step": 2})
    error = caught.value
    assert error.filename == str(root / "step_000002")
    assert "checkpoint step 2 was not saved" in error.strerror
    assert "free on its file system" in error.strerror
    assert "\n" not in str(error)
    assert sorted(p.name for p in root.iterdir()) == ["step_000001"]  # no partial .tmp left
    newest, state = latest_checkpoint(root)
    assert newest == first and state == {"step": 1}


def test_a_state_file_that_cannot_be_written_keeps_the_os_error(tmp_path, policies, monkeypatch):
    root = tmp_path / "checkpoints"
    real_write_text = Path.write_text

    def full(path, *args, **kwargs):
        if path.name == "state.json":
            raise OSError(errno.ENOSPC, FULL)
        return real_write_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError) as caught:
        save_checkpoint(root, 3, policies, {"step": 3})
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.strerror.startswith(f"checkpoint step 3 was not saved ({FULL}")
    assert caught.value.filename == str(root / "step_000003")
    assert not any(root.iterdir()) and latest_checkpoint(root) is None


def _rollouts() -> AgentRollouts:
    return AgentRollouts(
        agent="a",
        prompt_ids=["q0"],
        prompts=["prompt"],
        texts=[["\\boxed{1}", "\\boxed{2}"]],
        token_ids=[[[1], [2, 3]]],
        logprobs=[[np.array([-0.5]), np.array([-0.1, -0.2])]],
        finish_reasons=[["stop", "length"]],
        rewards=np.array([[1.0, 0.0]]),
    )


def test_a_store_file_that_cannot_be_written_is_an_error_naming_it(tmp_path, monkeypatch):
    store = TrajectoryStore(tmp_path)
    store.write("run", 0, _rollouts(), ["ok", "ok"], "tiny-a")

    def full(fd):
        raise OSError(errno.ENOSPC, FULL)

    monkeypatch.setattr(algorithms.storage.store.os, "fsync", full)
    with pytest.raises(OSError) as caught:
        store.write("run", 1, _rollouts(), ["ok", "ok"], "tiny-a")
    path = store.step_path(1, "a")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
    assert caught.value.strerror == f"{FULL}; the trajectory store file was not written"
    assert os.listdir(path.parent) == []  # neither the file nor its temporary copy
    monkeypatch.undo()
    assert store.read(0, "a", n=2).texts == [["\\boxed{1}", "\\boxed{2}"]]  # earlier steps intact


def test_graft_train_on_a_full_disk_is_one_line_and_resumes_from_the_last_checkpoint(
    tmp_path, capsys, monkeypatch
):
    """The second step's checkpoint (third weights file: two agents per checkpoint) fails."""
    import yaml

    calls = []
    real = transformers.modeling_utils.safe_save_file

    def fill_up(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 3:
            return _partial_then(SAFETENSORS_FULL, 1)(*args)
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", fill_up)
    run_dir = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(small_config(run_dir, "graft").to_dict()))
    assert cli.main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err.splitlines()
    checkpoints = run_dir / "checkpoints"
    assert err[-1].startswith("graft train: error: checkpoint step 2 was not saved (Error while ")
    assert err[-1].endswith(f": {checkpoints / 'step_000002'}")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000001"]
    assert latest_checkpoint(checkpoints)[1]["step"] == 1


def _full_fsync(monkeypatch) -> None:
    """Every fsync fails as a full disk makes the flush of buffered bytes fail."""

    def full(fd):
        raise OSError(errno.ENOSPC, FULL)

    monkeypatch.setattr(os, "fsync", full)


def test_a_metrics_row_that_cannot_be_appended_is_an_error_naming_the_log(tmp_path, monkeypatch):
    metrics = MetricsLog(tmp_path, tensorboard=False)
    metrics.write(0, "tiny-a", {"reward_mean": 0.5})
    _full_fsync(monkeypatch)
    with pytest.raises(OSError) as caught:
        metrics.write(1, "tiny-a", {"reward_mean": 0.25})
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(tmp_path / "metrics.jsonl")
    assert caught.value.strerror == (
        f"{FULL}; the metrics row of step 1 (tiny-a) was not written (the log keeps its "
        "earlier rows only)"
    )
    monkeypatch.undo()
    assert metrics.rows() == [{"step": 0, "agent": "tiny-a", "reward_mean": 0.5}]


def test_a_metrics_log_that_cannot_be_cut_back_is_an_error_naming_it_and_stays_whole(
    tmp_path, monkeypatch
):
    metrics = MetricsLog(tmp_path, tensorboard=False)
    for step in range(3):
        metrics.write(step, "tiny-a", {"reward_mean": 0.5})
    before = metrics.path.read_bytes()
    _full_fsync(monkeypatch)
    with pytest.raises(OSError) as caught:
        metrics.truncate_to(1)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(metrics.path)
    assert os.listdir(tmp_path) == ["metrics.jsonl"]  # no temporary copy left taking space
    assert metrics.path.read_bytes() == before


def test_graft_train_that_cannot_write_its_config_names_it_and_leaves_no_temporary_file(
    tmp_path, capsys, monkeypatch
):
    import yaml

    run_dir = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(small_config(run_dir, "graft", steps=1).to_dict()))
    _full_fsync(monkeypatch)
    assert cli.main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"graft train: error: {FULL}; the run's config was not written: {run_dir / 'config.yaml'}"
    )
    # the marker and the log that says why the run stopped; no temporary file
    assert sorted(p.name for p in run_dir.iterdir()) == ["graft-run.json", "run.log"]
    assert "No space left on device" in (run_dir / "run.log").read_text()


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("CUDA error: an illegal memory access was encountered"),
        SafetensorError("You are trying to save a non contiguous tensor"),
    ],
    ids=["torch", "safetensors"],
)
def test_a_checkpoint_that_fails_for_another_reason_raises_that_error_unchanged(
    error, tmp_path, policies, monkeypatch
):
    """Only a failed write is reported as "not saved (...; N MiB free)": a bug must not read
    as a full disk."""
    root = tmp_path / "checkpoints"

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", broken)
    with pytest.raises(type(error)) as caught:
        save_checkpoint(root, 1, policies, {"step": 1})
    assert caught.value is error
    assert not any(root.iterdir())  # its partial files still go
