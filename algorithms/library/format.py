"""The trajectory library on disk: one Parquet dataset of stored groups, keyed by prompt.

Layout::

    LIB/_library.json          format name and version (checked on every read)
    LIB/part-000000.parquet    one row per response; one part per build or import
    LIB/_MANIFEST.json         size and SHA-256 of each file beside it: the library's parts
    .LIB.lock                  beside LIB: held by a build or append while it writes

A new library is written into a hidden folder beside `LIB` and renamed into place, so a
library that exists is complete; an appended part is written to a temporary name and
renamed, then recorded in the manifest (as the run store does, `algorithms.storage.store`). The
manifest is the commit point: a part it does not list (an append killed before recording
it) is not read, only warned about. Builds and appends of one library take turns on the
lock file (`fcntl.flock`; beside the library, as a new one has no folder yet); reads take
no lock, and see the parts listed when they read the manifest.
Every read checks each file's digest, the version and each part's schema first: a damaged
file or a library written by another version is a one-line `LibraryError` naming the file.
Names starting with `_` are skipped by Parquet readers, so ``pyarrow.dataset.dataset(LIB)``
reads every part as one table (without the checks: `read_library` makes them).

The key of a prompt is the SHA-256 of its normalised problem text (`normalise_problem`):
Unicode NFC, every run of whitespace one space, no leading or trailing space. Nothing
else is changed (case, digits and symbols carry meaning in math), so the same problem
written by another dataset copy or exporter finds its groups, and a different one never.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from algorithms.storage.store import (
    MANIFEST,
    StoreCorruptError,
    atomic_write_bytes,
    check_digest,
    record_digest,
)

log = logging.getLogger(__name__)

LIBRARY_AGENT = "library"
"""The library's name as an agent of a receiver's rollouts (exchange/library-><receiver>/...)."""
FORMAT = "graft-trajectory-library"
VERSION = 1
META = "_library.json"
VERSION_KEY = b"graft_library_version"
LOGPROB_ORIGINS = ("generation", "rescored", "missing")
"""Where a response's log-probs come from: recorded while it was sampled, recomputed by
scoring the text with the source model (`graft library import --score-with`), or missing
(imported without them: the entry is kept, marked, and graft-library refuses it)."""

SCHEMA = pa.schema(
    [
        ("key", pa.string()),  # prompt_key(problem)
        ("problem", pa.string()),
        ("dataset", pa.string()),  # "<name>/<split>" where known, else null
        ("prompt_id", pa.string()),  # the dataset's problem id where known, else null
        ("group_id", pa.string()),  # unique within the library
        ("source", pa.string()),  # the run directory or imported file
        ("agent", pa.string()),  # the agent in the source run (null for imports)
        ("model_id", pa.string()),
        ("tokenizer_id", pa.string()),
        ("step", pa.int64()),  # the source run's step (null: unknown)
        ("generated_at", pa.float64()),  # Unix time the group was written
        ("response_index", pa.int64()),
        ("response", pa.string()),
        ("token_ids", pa.list_(pa.int64())),  # null: unknown
        ("logprobs", pa.list_(pa.float64())),  # null: missing
        ("logprob_origin", pa.string()),  # one of LOGPROB_ORIGINS
        ("finish_reason", pa.string()),
        ("reward", pa.float64()),  # this project's verifier, when built or imported
        ("status", pa.string()),
    ],
    metadata={VERSION_KEY: str(VERSION).encode()},
)
_GROUP_FIELDS = (
    "key", "problem", "dataset", "prompt_id", "source", "agent", "model_id", "tokenizer_id",
    "step", "generated_at",
)  # fmt: skip
REBUILD = "rebuild the library (graft library build / import) or restore it from a copy"


class LibraryError(ValueError):
    """A trajectory library is missing, damaged, of another version, or unusable as asked."""


def normalise_problem(text: str) -> str:
    """The problem text as its key sees it: NFC, whitespace runs as one space, stripped."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def prompt_key(text: str) -> str:
    """The library key of a problem: SHA-256 (hex) of `normalise_problem(text)`."""
    return hashlib.sha256(normalise_problem(text).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LibraryGroup:
    """One stored group: n responses of one source model to one prompt."""

    group_id: str
    key: str
    problem: str
    dataset: str | None
    prompt_id: str | None
    source: str
    agent: str | None
    model_id: str
    tokenizer_id: str
    step: int | None
    generated_at: float
    texts: list[str]
    token_ids: list[list[int] | None]
    logprobs: list[np.ndarray | None]
    logprob_origins: list[str]
    finish_reasons: list[str]
    rewards: np.ndarray
    statuses: list[str]

    @property
    def n(self) -> int:
        return len(self.texts)

    @property
    def k(self) -> int:
        return int(np.count_nonzero(self.rewards == 1.0))


def group_rows(group: LibraryGroup) -> dict[str, list]:
    """The library rows (column -> values) of one group."""
    rows: dict[str, list] = {name: [] for name in SCHEMA.names}
    for i in range(group.n):
        for name in _GROUP_FIELDS:
            rows[name].append(getattr(group, name))
        logprobs = group.logprobs[i]
        rows["group_id"].append(group.group_id)
        rows["response_index"].append(i)
        rows["response"].append(group.texts[i])
        rows["token_ids"].append(group.token_ids[i])
        rows["logprobs"].append(None if logprobs is None else logprobs.tolist())
        rows["logprob_origin"].append(group.logprob_origins[i])
        rows["finish_reason"].append(group.finish_reasons[i])
        rows["reward"].append(float(group.rewards[i]))
        rows["status"].append(group.statuses[i])
    return rows


def groups_table(groups: Sequence[LibraryGroup]) -> pa.Table:
    rows: dict[str, list] = {name: [] for name in SCHEMA.names}
    for group in groups:
        for name, values in group_rows(group).items():
            rows[name] += values
    return pa.Table.from_pydict(rows, schema=SCHEMA)


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def _parts(root: Path) -> list[Path]:
    return sorted(root.glob("part-*.parquet"))


def _write(path: Path, data: bytes) -> None:
    """`path` whole, then its record in the manifest: the library holds it from then on."""
    atomic_write_bytes(path, data, what="the library file")
    record_digest(path)


@contextmanager
def _write_lock(root: Path) -> Iterator[None]:
    """Hold library `root`'s write lock: other builds and appends of it wait meanwhile."""
    with (root.parent / f".{root.name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


def write_library(groups: Sequence[LibraryGroup], out: str | os.PathLike, append: bool) -> Path:
    """Write `groups` as a new library `out`, or (`append`) as a new part of library `out`,
    whose files are checked first. Returns the part written."""
    if not groups:
        raise LibraryError(f"{out}: no groups to write")
    twice = [gid for gid, count in Counter(g.group_id for g in groups).items() if count > 1]
    if twice:
        raise LibraryError(f"{out}: group {twice[0]} is given twice (a source named twice?)")
    root = Path(out)
    data = _parquet_bytes(groups_table(groups))
    if append and not root.is_dir():
        raise LibraryError(
            f"{root} is not a trajectory library (no such directory): build it without --append"
        )
    root.parent.mkdir(parents=True, exist_ok=True)
    with _write_lock(root):
        return _append(root, groups, data) if append else _create(root, data)


def _append(root: Path, groups: Sequence[LibraryGroup], data: bytes) -> Path:
    known = {group.group_id for group in read_library(root)}
    repeated = sorted(known & {group.group_id for group in groups})
    if repeated:
        raise LibraryError(
            f"{root}: already holds {len(repeated)} of these groups (e.g. {repeated[0]}): "
            "each source can be added once"
        )
    existing = _parts(root)  # listed or not: an unlisted one keeps its name, and is not read
    number = int(existing[-1].stem.removeprefix("part-")) + 1 if existing else 0
    part = root / f"part-{number:06d}.parquet"
    _write(part, data)
    return part


def _create(root: Path, data: bytes) -> Path:
    if root.exists():
        raise LibraryError(
            f"{root} exists: add to a library with --append, or choose another --out"
        )
    tmp = root.with_name(f".{root.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a write that was killed
    tmp.mkdir()
    _write(tmp / META, json.dumps({"format": FORMAT, "version": VERSION}).encode())
    _write(tmp / "part-000000.parquet", data)
    os.replace(tmp, root)
    return root / "part-000000.parquet"


def _manifest(root: Path) -> tuple[bytes, dict]:
    """The manifest's bytes and records, read once: what the library holds."""
    manifest = root / MANIFEST
    if not manifest.is_file():
        raise LibraryError(f"{manifest} is missing, so the library cannot be checked: {REBUILD}")
    data = manifest.read_bytes()
    try:
        records = json.loads(data)
    except ValueError as error:
        raise LibraryError(f"{manifest} is corrupt ({error}): {REBUILD}") from None
    if not isinstance(records, dict):
        raise LibraryError(f"{manifest} is corrupt (not a mapping of files): {REBUILD}")
    return data, records


def _check_meta(root: Path) -> None:
    meta_path = root / META
    check_digest(meta_path, "the library's version", REBUILD)
    try:
        meta = json.loads(meta_path.read_text())
    except ValueError as error:
        raise LibraryError(f"{meta_path}: not JSON ({error})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise LibraryError(f"{meta_path}: not a {FORMAT} description")
    if meta.get("version") != VERSION:
        raise LibraryError(
            f"{meta_path}: library version {meta.get('version')!r}, this graft reads version "
            f"{VERSION}: {REBUILD}"
        )


def _read_part(path: Path) -> pa.Table:
    check_digest(path, "a library part", REBUILD)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as error:  # intact digest, unreadable file
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise LibraryError(f"{path}: not a readable Parquet file: {reason}") from None
    version = (table.schema.metadata or {}).get(VERSION_KEY)
    if version != str(VERSION).encode():
        found = version.decode() if version else "none"
        raise LibraryError(f"{path}: part of library version {found}, expected {VERSION}")
    if not table.schema.equals(SCHEMA):
        ours = {f.name: f.type for f in SCHEMA}
        theirs = {f.name: f.type for f in table.schema}
        diffs = [
            f"{name}: {theirs.get(name, 'missing')} (expected {ours.get(name, 'no such column')})"
            for name in sorted(ours.keys() | theirs.keys())
            if ours.get(name) != theirs.get(name)
        ]
        raise LibraryError(
            f"{path}: its columns do not match library version {VERSION} ({'; '.join(diffs)})"
        )
    return table


@dataclass(frozen=True)
class Library:
    """A library as one read saw it: its groups and the digest of the manifest that listed
    their parts (which changes with every append: a run records it, `algorithms.training.loop`)."""

    manifest_sha256: str
    groups: list[LibraryGroup]


def read_library(path: str | os.PathLike) -> list[LibraryGroup]:
    """Every group of the library at `path` (`load_library`)."""
    return load_library(path).groups


def load_library(path: str | os.PathLike) -> Library:
    """The library at `path`: each file its manifest lists checked (digest, version, schema)
    and each group complete (responses 0..n-1 once, one source, prompt and model)."""
    root = Path(path)
    if not root.is_dir():
        raise LibraryError(f"{root} is not a trajectory library (no such directory)")
    if not (root / META).is_file():
        raise LibraryError(f"{root / META} is missing: {root} is not a trajectory library")
    data, records = _manifest(root)
    listed = sorted(name for name in records if name.startswith("part-"))
    unlisted = [part for part in _parts(root) if part.name not in records]
    if unlisted:
        log.warning(
            "%s not listed in %s (an append in progress, or one that was interrupted): ignored",
            ", ".join(str(part) for part in unlisted),
            root / MANIFEST,
        )
    missing = [name for name in listed if not (root / name).is_file()]
    if missing:
        raise LibraryError(f"{root / missing[0]} is missing (listed in {root / MANIFEST})")
    try:
        _check_meta(root)
        tables = [(root / name, _read_part(root / name).to_pylist()) for name in listed]
    except StoreCorruptError as error:  # one error type for every unusable library
        raise LibraryError(str(error)) from None
    rows: dict[str, list[dict]] = {}
    where: dict[str, Path] = {}
    for part, part_rows in tables:
        for row in part_rows:
            group_id = row["group_id"]
            if where.setdefault(group_id, part) != part:
                raise LibraryError(
                    f"{part}: group {group_id} is also in {where[group_id]} (added twice)"
                )
            rows.setdefault(group_id, []).append(row)
    groups = [_group(group_id, group, where[group_id]) for group_id, group in rows.items()]
    return Library(hashlib.sha256(data).hexdigest(), groups)


def _group(group_id: str, rows: list[dict], part: Path) -> LibraryGroup:
    rows = sorted(rows, key=lambda row: row["response_index"])
    if [row["response_index"] for row in rows] != list(range(len(rows))):
        raise LibraryError(f"{part}: group {group_id} is incomplete (responses 0..n-1 expected)")
    first = rows[0]
    for name in _GROUP_FIELDS:
        if any(row[name] != first[name] for row in rows):
            raise LibraryError(f"{part}: group {group_id} has several values of {name!r}")
    bad = {row["logprob_origin"] for row in rows} - set(LOGPROB_ORIGINS)
    if bad:
        raise LibraryError(f"{part}: group {group_id}: unknown logprob_origin {sorted(bad)}")
    return LibraryGroup(
        group_id=group_id,
        **{name: first[name] for name in _GROUP_FIELDS},
        texts=[row["response"] for row in rows],
        token_ids=[row["token_ids"] for row in rows],
        logprobs=[
            None if row["logprobs"] is None else np.asarray(row["logprobs"], dtype=np.float64)
            for row in rows
        ],
        logprob_origins=[row["logprob_origin"] for row in rows],
        finish_reasons=[row["finish_reason"] for row in rows],
        rewards=np.array([row["reward"] for row in rows], dtype=np.float64),
        statuses=[row["status"] for row in rows],
    )
