"""What a run directory, a checkpoint or a stored peer must agree with before a run uses it.

`Trainer` checks its run directory before any model loads (`check_run_dir`), and refuses,
each with one line naming the key and what differs: a run directory that cannot be used
(`run_dir.check_writable`), one whose steps were computed with settings that change
results (`check_config`), one whose checkpoints are all unusable (`usable_checkpoint`:
`--restart` starts it over with the earlier files kept), a graft-library checkpoint whose
library changed since (`check_library_unchanged`) and a stored peer whose prompt stream is
not the run's (`check_peer_store`). It warns when a checkpoint was written with another
torch thread count (`check_threads`).
Each checkpoint's state.json records what these checks read (`loop_state`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from algorithms.exchange import ExchangeStrategy
from algorithms.storage.store import StoreError, TrajectoryStore
from algorithms.training.checkpoint import exchange_state, has_checkpoints, latest_checkpoint
from algorithms.training.run_config import (
    RESTART_FLAG,
    ConfigError,
    Start,
    TrainConfig,
    parse_yaml,
    result_differences,
)
from algorithms.training.run_dir import EARLIER, check_fresh, check_writable, holds_steps

log = logging.getLogger(__name__)


def check_run_dir(
    run_dir: Path, ours: Mapping[str, Any], start: Start = "resume"
) -> tuple[Path, dict[str, Any]] | None:
    """Everything about `run_dir` that can refuse a run, checked before any model loads:
    that it can be used (`check_writable`; for "fresh", that it may be deleted), and for a
    resume that it holds no other run's settings (`check_config`), if it holds checkpoints
    a usable one, and that the trajectories stored before it are intact; returns that
    checkpoint (None: start at step 0)."""
    if start == "fresh":
        check_fresh(run_dir)
    elif start == "restart":
        check_fresh(run_dir, "--restart", "move the files of")
    check_writable(run_dir)
    if start != "resume":
        return None
    check_config(run_dir, ours)
    found = usable_checkpoint(run_dir)
    if found is not None and ours["store_trajectories"]:  # the stored steps the run keeps
        TrajectoryStore(run_dir).verify(before_step=int(found[1]["step"]))
    return found


def check_config(run_dir: Path, ours: Mapping[str, Any]) -> None:
    """Refuse a run directory whose steps were computed with other settings that change
    results, naming each; settings that do not (`RESUMABLE_CHANGES`) may differ, and a
    directory whose earlier attempt recorded no step takes any config."""
    path = run_dir / "config.yaml"
    if not path.exists():
        return
    differences = result_differences(parse_yaml(path.read_text()), ours)
    if not differences:
        return
    if holds_steps(run_dir):
        raise ConfigError(
            f"run_dir: {run_dir} holds a run whose settings differ in what changes results "
            f"(its value -> this config's): {'; '.join(differences)}; use its values to "
            f"resume it, {RESTART_FLAG} to start over there, or choose another run_dir"
        )
    log.info(
        "%s: its earlier attempt recorded no step; starting over with this config (%s)",
        run_dir,
        "; ".join(differences),
    )


def usable_checkpoint(run_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest intact checkpoint to resume from, or None when there is none.

    A directory whose checkpoints are all unusable is refused (`ConfigError` naming
    `RESTART_FLAG`): starting it over from step 0 is the user's call, not a silent one."""
    checkpoints = run_dir / "checkpoints"
    found = latest_checkpoint(checkpoints)
    if found is None and has_checkpoints(checkpoints):
        raise ConfigError(
            f"run_dir: {run_dir} has checkpoints but none is usable (the warnings above say "
            f"why); rerun with {RESTART_FLAG} to start from step 0 with its files kept in "
            f"{run_dir / EARLIER}<UTC time>/, or choose another run_dir"
        )
    return found


def check_library_unchanged(
    run_dir: Path, library: str, manifest_sha256: str, checkpoint: Path, state: Mapping[str, Any]
) -> None:
    """Refuse to resume a graft-library run whose library changed since `checkpoint`
    (its manifest's SHA-256 differs from the one the checkpoint recorded): an appended
    part changes which groups a prompt gets, so the resume would not be exact."""
    recorded = state.get("library_manifest_sha256")
    if recorded != manifest_sha256:
        raise ConfigError(
            f"{run_dir}: checkpoint {checkpoint} was trained on library {library} when its "
            f"manifest's SHA-256 was {recorded}; it is {manifest_sha256} now (an --append "
            "since?), which changes the groups the run gets: resume with the library as it "
            "was, or choose another run_dir"
        )


def loop_state(
    step: int, algorithm: str, strategy: ExchangeStrategy, library_sha256: str | None
) -> dict[str, Any]:
    """The loop's state.json: the step and the exchange strategy's state, and what a resume
    checks: the torch thread count (`check_threads`), the graft-library manifest's SHA-256
    (`check_library_unchanged`)."""
    return {
        "step": step,
        "algorithm": algorithm,
        "exchange": exchange_state(strategy),
        "threads": torch.get_num_threads(),
        "library_manifest_sha256": library_sha256,
    }


def check_threads(checkpoint: Path, state: Mapping[str, Any]) -> None:
    """Warn when `checkpoint` was written with another torch thread count than this run's:
    the run continues, but not bit-identically to an uninterrupted one."""
    threads = torch.get_num_threads()
    if state.get("threads", threads) != threads:
        log.warning(
            "checkpoint %s was written with %d torch thread(s) and this run resumes "
            "with %d: it continues, but other thread counts change results in the "
            "last bits, so it will not be bit-identical to an uninterrupted run",
            checkpoint,
            state["threads"],
            threads,
        )


def stream_meta(config: TrainConfig, n: int) -> dict[str, Any]:
    """What defines a run's prompt stream (and so a stored peer's), for its store."""
    env = config.env
    return {
        "dataset": env.dataset,
        "split": env.split,
        "dataset_options": dict(env.dataset_options),
        "seed": config.seed,
        "batch_size": env.batch_size,
        "n": n,
    }


def check_peer_store(store: TrajectoryStore, run_dir: str, ours: Mapping[str, Any]) -> None:
    """Refuse a stored peer run (`run_dir`) whose prompt stream differs from `ours`."""
    meta = store.read_meta()
    diffs = {k: (meta.get(k), v) for k, v in ours.items() if meta.get(k) != v}
    if diffs:
        raise StoreError(
            f"stored peer run {run_dir} does not match this run's prompt stream: "
            + ", ".join(f"{k}: stored {a!r} vs ours {b!r}" for k, (a, b) in diffs.items())
        )
