"""What a run directory, a checkpoint or a stored peer must agree with before a run uses it.

`Trainer` refuses, each with one line naming what differs: a run directory whose steps
were computed with settings that change results (`check_config`), a graft-library
checkpoint whose library changed since (`check_library_unchanged`) and a stored peer
whose prompt stream is not the run's (`check_peer_store`). It restarts, with the earlier
files kept, a directory whose checkpoints are all unusable (`usable_checkpoint`), and
warns when a checkpoint was written with another torch thread count (`check_threads`).
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
from algorithms.training.run_config import ConfigError, TrainConfig, parse_yaml, result_differences
from algorithms.training.run_dir import holds_steps, set_aside

log = logging.getLogger(__name__)


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
            f"{run_dir} holds a run whose settings differ in what changes results "
            f"(its value -> this config's): {'; '.join(differences)}; use its values to "
            "resume it, or choose another run_dir"
        )
    log.info(
        "%s: its earlier attempt recorded no step; starting over with this config (%s)",
        run_dir,
        "; ".join(differences),
    )


def usable_checkpoint(run_dir: Path, resume: bool) -> tuple[Path, dict[str, Any]] | None:
    """The newest intact checkpoint to resume from, or None to start at step 0.

    A directory whose checkpoints are all unusable restarts from step 0, its earlier
    files set aside (`algorithms.training.run_dir.set_aside`), never deleted; call this before
    the run's config.yaml replaces the one that describes those files."""
    checkpoints = run_dir / "checkpoints"
    found = latest_checkpoint(checkpoints) if resume else None
    if found is None and resume and has_checkpoints(checkpoints):
        kept = set_aside(run_dir)
        log.warning(
            "%s: no checkpoint is usable (see above), so the run restarts from step 0; "
            "the earlier attempt's files are kept in %s",
            run_dir,
            kept,
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
