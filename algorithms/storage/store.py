"""The trajectory store: every rollout group of a run, as Parquet, one file per step and agent.

Layout under the run directory::

    trajectories/_meta.json                    what the prompt stream was (for replay checks)
    trajectories/step_000012/<agent>.parquet   one row per response
    trajectories[/step_000012]/_MANIFEST.json  size and SHA-256 of each file beside it

Each file is written to a temporary name and renamed into place, so a file that
exists is complete (a run killed mid-write leaves only a hidden `.*.tmp` file
behind, which the next write of that step replaces); then its digest goes into its
folder's manifest, written the same way. Every read checks the digest first: one
flipped bit in a Parquet file can silently change a response's text, tokens or
log-probs (issue 17: 1,951 of 3,459 single-bit flips in one file did), so a file that
does not match its record, or has none, is refused (`StoreCorruptError`). Names
starting with `_` or `.` are skipped by Parquet dataset readers, so the directory
reads as one table: ``pyarrow.dataset.dataset(run_dir + "/trajectories")`` or
``pandas.read_parquet`` (which check no digests: `TrajectoryStore.verify` does).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from algorithms.storage.digests import file_record, mismatch
from graft_env.types import AgentRollouts

SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("agent", pa.string()),
        ("model_id", pa.string()),
        ("step", pa.int64()),
        ("prompt_index", pa.int64()),
        ("prompt_id", pa.string()),
        ("prompt", pa.string()),
        ("response_index", pa.int64()),
        ("response", pa.string()),
        ("token_ids", pa.list_(pa.int64())),
        ("logprobs", pa.list_(pa.float64())),
        ("finish_reason", pa.string()),
        ("reward", pa.float64()),
        ("status", pa.string()),
    ]
)


MANIFEST = "_MANIFEST.json"
_STEP = re.compile(r"^step_(\d{6,})$")


class StoreError(ValueError):
    """A trajectory store is missing, incomplete or does not match the run reading it."""


class StoreCorruptError(StoreError):
    """A store file does not match the digest recorded when it was written, has no digest,
    or cannot be parsed: it was damaged and is not read."""


def atomic_write_bytes(path: Path, data: bytes, what: str = "the trajectory store file") -> None:
    """Write `path` whole or not at all; a failed write (a full disk, whose `OSError` names
    no file) is an `OSError` naming `path` (and saying that `what` was not written), and
    leaves no temporary file taking space."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        tmp.unlink(missing_ok=True)
        reason = error.strerror or str(error)
        raise OSError(error.errno, f"{reason}; {what} was not written", str(path)) from error
    os.replace(tmp, path)


def record_digest(path: Path) -> None:
    """Record the just written `path` in its folder's manifest (atomically).

    An unreadable manifest is replaced: the files it listed then have no digest, which
    their next read reports, rather than blocking this write."""
    manifest = path.parent / MANIFEST
    try:
        records = json.loads(manifest.read_text())
    except (OSError, ValueError):  # missing, or corrupt (UnicodeDecodeError is a ValueError)
        records = {}
    if not isinstance(records, dict):
        records = {}
    record = file_record(path)
    if records.get(path.name) == record:
        return  # rewritten unchanged (the stream's description on each resume)
    records[path.name] = record
    data = json.dumps(records, indent=2, sort_keys=True).encode()
    atomic_write_bytes(manifest, data, what="the manifest")


def check_digest(
    path: Path, where: str, remedy: str = "restore it from a copy or record the run again"
) -> None:
    """Refuse `path` unless it matches the digest its folder's manifest recorded for it;
    `where` (e.g. "step 3") goes into the one-line error beside the file's path, and
    `remedy` (what to do about a damaged file) after it."""
    manifest = path.parent / MANIFEST
    if not manifest.is_file():
        raise StoreCorruptError(
            f"{path} ({where}): {manifest} is missing, so the file cannot be checked (stores "
            "written before digests were recorded have none: record the run again)"
        )
    try:
        records = json.loads(manifest.read_text())
    except ValueError as error:
        raise StoreCorruptError(f"{path} ({where}): {manifest} is corrupt ({error})") from None
    record = records.get(path.name) if isinstance(records, dict) else None
    if not (
        isinstance(record, dict)
        and isinstance(record.get("size"), int)
        and isinstance(record.get("sha256"), str)
    ):
        raise StoreCorruptError(f"{path} ({where}): no SHA-256 recorded for it in {manifest}")
    problem = mismatch(path, record)
    if problem:
        raise StoreCorruptError(
            f"{path} ({where}) {problem} ({manifest}): it was damaged after it was written; "
            f"{remedy}"
        )


@dataclass
class StoredRollouts(AgentRollouts):
    """One agent's groups of one step as the store reads them back: its rollouts, with
    the rewards as recorded, and each response's verifier status `statuses[p][i]`."""

    statuses: list[list[str]] = field(kw_only=True)


class TrajectoryStore:
    """Reads and writes one run's `trajectories/` directory."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.root = Path(run_dir) / "trajectories"

    def step_path(self, step: int, agent: str) -> Path:
        return self.root / f"step_{step:06d}" / f"{agent}.parquet"

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        """Record what defines the prompt stream (dataset, split, seed, n, batch size)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "_meta.json"
        atomic_write_bytes(path, json.dumps(dict(meta), indent=2).encode())
        record_digest(path)

    def read_meta(self) -> dict[str, Any]:
        path = self.root / "_meta.json"
        if not path.is_file():
            raise StoreError(f"{path} is missing: {self.root} is not a trajectory store")
        check_digest(path, "the prompt stream's description")
        return json.loads(path.read_text())

    def verify(self, before_step: int) -> None:
        """Check the digest of every stored file of the steps before `before_step` (what a
        resumed run keeps; it rewrites the later ones)."""
        if not self.root.is_dir():
            return
        for folder in sorted(self.root.iterdir()):
            match = _STEP.match(folder.name)
            if match and folder.is_dir() and int(match.group(1)) < before_step:
                for path in sorted(folder.glob("*.parquet")):
                    check_digest(path, f"step {int(match.group(1))}")

    def write(
        self,
        run_id: str,
        step: int,
        rollouts: AgentRollouts,
        statuses: Sequence[str],
        model_id: str,
    ) -> Path:
        """Write one agent's groups of one step atomically; returns the file path."""
        n = rollouts.n
        rows: dict[str, list] = {name: [] for name in SCHEMA.names}
        for p in range(len(rollouts.prompts)):
            for i in range(n):
                rows["run_id"].append(run_id)
                rows["agent"].append(rollouts.agent)
                rows["model_id"].append(model_id)
                rows["step"].append(step)
                rows["prompt_index"].append(p)
                rows["prompt_id"].append(rollouts.prompt_ids[p])
                rows["prompt"].append(rollouts.prompts[p])
                rows["response_index"].append(i)
                rows["response"].append(rollouts.texts[p][i])
                rows["token_ids"].append(list(rollouts.token_ids[p][i]))
                rows["logprobs"].append(np.asarray(rollouts.logprobs[p][i], np.float64).tolist())
                rows["finish_reason"].append(rollouts.finish_reasons[p][i])
                rows["reward"].append(float(rollouts.rewards[p, i]))
                rows["status"].append(statuses[p * n + i])
        table = pa.Table.from_pydict(rows, schema=SCHEMA)
        path = self.step_path(step, rollouts.agent)
        path.parent.mkdir(parents=True, exist_ok=True)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        atomic_write_bytes(path, sink.getvalue().to_pybytes())
        record_digest(path)
        return path

    def read(self, step: int, agent: str, n: int) -> StoredRollouts:
        """One agent's groups of one step, checked for completeness."""
        path = self.step_path(step, agent)
        if not path.is_file():
            raise StoreError(f"no stored trajectories for agent {agent!r} at step {step}: {path}")
        check_digest(path, f"step {step}")
        try:
            table = pq.read_table(path).to_pydict()
        except (OSError, pa.ArrowException) as error:  # intact digest, unreadable file
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise StoreCorruptError(
                f"{path} (step {step}) is not a readable Parquet file: {reason}"
            ) from None
        if "finish_reason" not in table:
            # Which responses ended with EOS can't be recovered: the source's EOS id
            # was never stored, and a default would re-create the bug the column fixes.
            raise StoreError(
                f"{path} has no finish_reason column (written before finish reasons were "
                "stored); re-record it by running the source run again into a fresh run_dir"
            )
        num_prompts, remainder = divmod(len(table["response"]), n)
        if remainder or num_prompts == 0:
            raise StoreError(f"{path}: {len(table['response'])} rows is not a multiple of n={n}")
        order = sorted(
            range(len(table["response"])),
            key=lambda r: (table["prompt_index"][r], table["response_index"][r]),
        )
        expected = [(p, i) for p in range(num_prompts) for i in range(n)]
        found = [(table["prompt_index"][r], table["response_index"][r]) for r in order]
        if found != expected:
            raise StoreError(
                f"{path}: groups are incomplete (expected {num_prompts} groups of {n})"
            )

        def grouped(column: str, convert=lambda v: v) -> list[list]:
            values = [convert(table[column][r]) for r in order]
            return [values[p * n : (p + 1) * n] for p in range(num_prompts)]

        first = [order[p * n] for p in range(num_prompts)]
        return StoredRollouts(
            agent=agent,
            prompt_ids=[table["prompt_id"][r] for r in first],
            prompts=[table["prompt"][r] for r in first],
            texts=grouped("response"),
            token_ids=grouped("token_ids"),
            logprobs=grouped("logprobs", lambda v: np.asarray(v, dtype=np.float64)),
            finish_reasons=grouped("finish_reason"),
            rewards=np.asarray(grouped("reward"), dtype=np.float64),
            statuses=grouped("status"),
        )
