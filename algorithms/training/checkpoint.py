"""Checkpoints that are either complete or detectably not.

A checkpoint is a directory ``checkpoints/step_000010/`` holding one sub-directory
per policy (weights, optimizer and RNG state, written by ``Policy.save``), the
loop's own ``state.json`` (the step, and the exchange strategy's state under
``"exchange"``: `exchange_state`), and a ``MANIFEST.json`` listing the size and
SHA-256 of every file. It is assembled under a temporary name and renamed into
place only after the manifest is written, so a run killed mid-save leaves either
nothing or a ``.tmp`` directory; a save that fails removes its partial files, and one
that could not write (a full disk) raises an `OSError` naming the checkpoint and the
free space (any other error is raised as it is). On resume, a checkpoint whose manifest
is missing or does not match its files is reported and skipped in favour of the
previous good one; an intact one whose strategy state does not fit the run is refused
(`CheckpointError`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from algorithms.exchange import ExchangeStrategy
from algorithms.storage.digests import file_record, mismatch
from graft_env.policies import Policy

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """An intact checkpoint that cannot resume this run."""


_NAME = re.compile(r"^step_(\d{6,})$")


def _manifest(directory: Path) -> dict[str, dict[str, Any]]:
    return {
        str(path.relative_to(directory)): file_record(path)
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != "MANIFEST.json"
    }


def save_checkpoint(
    root: str | os.PathLike,
    step: int,
    policies: Mapping[str, Policy],
    state: Mapping[str, Any],
    keep: int = 2,
) -> Path:
    """Write checkpoint `step` (the number of completed steps) and prune old ones."""
    root = Path(root)
    final = root / f"step_{step:06d}"
    tmp = root / f"step_{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for name, policy in policies.items():
            policy.save(tmp / name)
        (tmp / "state.json").write_text(json.dumps(dict(state), indent=2, sort_keys=True))
        (tmp / "MANIFEST.json").write_text(json.dumps(_manifest(tmp), indent=2))
    except Exception as error:
        # A full disk: safetensors and torch.save do not say which file (torch not even
        # that the disk is full), so the error names the checkpoint and the free space
        # (measured first). Any other error (a bug) is raised as it is. Either way the
        # partial files go, so a retry has their room; the older checkpoints stay.
        failure = _write_error(error, step, final) if _failed_write(error) else None
        shutil.rmtree(tmp, ignore_errors=True)
        if failure is None:
            raise
        raise failure from error
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in sorted(_checkpoints(root))[:-keep]:
        shutil.rmtree(old[1], ignore_errors=True)
    return final


# What safetensors and torch.save raise when a file cannot be written (a full disk measured
# on a tmpfs: "Error while serializing: I/O error: No space left on device (os error 28)",
# "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"; torch's archive
# writer also says "PytorchStreamWriter failed writing file ...: file write failed").
_SAFETENSORS_WRITE = "I/O error"
_TORCH_WRITE = ("unexpected pos", "PytorchStreamWriter failed", "file write failed")


def _failed_write(error: Exception) -> bool:
    """Whether `error` says a file could not be written, rather than what was saved."""
    if isinstance(error, OSError):
        return True
    if isinstance(error, SafetensorError):
        return _SAFETENSORS_WRITE in str(error)
    return isinstance(error, RuntimeError) and any(m in str(error) for m in _TORCH_WRITE)


def _write_error(error: BaseException, step: int, final: Path) -> OSError:
    """One line: what failed and the free space, with the checkpoint as the file name."""
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    free = shutil.disk_usage(final.parent).free / 2**20
    return OSError(
        error.errno if isinstance(error, OSError) else errno.EIO,
        f"checkpoint step {step} was not saved ({' '.join(reason.split())}; "
        f"{free:.1f} MiB free on its file system); its partial files were removed",
        str(final),
    )


def _checkpoints(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = _NAME.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)


def has_checkpoints(root: str | os.PathLike) -> bool:
    """Whether `root` holds a checkpoint, intact or not (a partial `.tmp` save is none)."""
    return bool(_checkpoints(Path(root)))


def verify_checkpoint(path: Path) -> str | None:
    """None if the checkpoint is complete and intact, else what is wrong with it."""
    manifest_path = path / "MANIFEST.json"
    if not manifest_path.is_file():
        return "MANIFEST.json is missing (partial checkpoint)"
    try:
        expected = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as error:
        return f"MANIFEST.json is corrupt: {error}"
    if "state.json" not in expected:
        return "state.json is not in the manifest"
    for relative, entry in expected.items():
        file = path / relative
        if not file.is_file():
            return f"{relative} is missing"
        problem = mismatch(file, entry)
        if problem:
            return f"{relative} {problem}"
    return None


def latest_checkpoint(root: str | os.PathLike) -> tuple[Path, dict[str, Any]] | None:
    """The newest intact checkpoint and its loop state; broken ones are logged and skipped."""
    for step, path in reversed(_checkpoints(Path(root))):
        problem = verify_checkpoint(path)
        if problem is None:
            return path, json.loads((path / "state.json").read_text())
        log.warning(
            "checkpoint %s (step %d) is unusable: %s; trying an older one", path, step, problem
        )
    return None


def restore_checkpoint(
    path: Path, state: Mapping[str, Any], policies: Mapping[str, Policy], strategy: ExchangeStrategy
) -> int:
    """Load checkpoint `path` (its loop `state` read already) into the strategy and every
    policy; returns the step the run resumes at."""
    restore_exchange_state(strategy, state, path)
    for name, policy in policies.items():
        policy.load(path / name)
    return int(state["step"])


def exchange_state(strategy: ExchangeStrategy) -> dict[str, Any]:
    """The strategy's name and state, for the loop state saved with a checkpoint."""
    return {"strategy": strategy.name, "state": strategy.state_dict()}


def restore_exchange_state(
    strategy: ExchangeStrategy, state: Mapping[str, Any], path: Path
) -> None:
    """Load the strategy state a checkpoint saved; refuse one that is not this strategy's.

    A checkpoint from before strategies had state counts as an empty state, which a
    stateless strategy takes and a stateful one refuses (its resume would not be exact).
    """
    saved = state.get("exchange", {"strategy": strategy.name, "state": {}})
    if saved["strategy"] != strategy.name:
        raise CheckpointError(
            f"checkpoint {path}: it holds the state of exchange strategy {saved['strategy']!r}, "
            f"this run's algorithm uses {strategy.name!r}"
        )
    try:
        strategy.load_state_dict(saved["state"])
    except ValueError as error:
        raise CheckpointError(f"checkpoint {path}: {error}") from None
