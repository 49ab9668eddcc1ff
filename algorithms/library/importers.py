"""Import rollouts generated elsewhere into a trajectory library.

One generic importer reads a JSONL or Parquet file with one row per response: the
problem text, the response and, where the file has them, the generation log-probs
(per token), token ids, finish reason, reward, step, time and a group id. vLLM offline
generation dumps and verl/TRL rollout logs are such files once their columns are named
(`columns`: role -> the file's column, e.g. {"prompt": "question", "logprobs": "old_logp"}).

Every row's problem is matched by its key (`prompt_key`) to a problem of the dataset the
library is for, whose gold answer re-verifies the response with this project's verifier
(GRAFT-SPEC §9: the file's own reward is only compared, and the disagreements counted).
Rows of prompts the dataset lacks are skipped and counted. A response without generation
log-probs is scored with the source model when `score_with` names it (`rescored`), and
is otherwise kept and marked `missing`: the compatibility score needs them, so
graft-library refuses such entries with a one-line error rather than guessing them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from algorithms.library.format import LibraryError, LibraryGroup, prompt_key, write_library
from algorithms.types import FINISH_REASONS

ROLES = (
    "prompt", "response", "logprobs", "token_ids", "finish_reason", "reward", "prompt_id",
    "step", "time", "group",
)  # fmt: skip
"""What a column can hold; prompt and response are required, the others optional.
`time` is when the response was generated, in Unix seconds (default: the file's mtime);
`group` separates several groups of one prompt and step (rows of one prompt, step and
group form one group, in file order)."""


@dataclass(frozen=True)
class ImportSpec:
    """What to import and how to read it."""

    path: str
    model: str  # the source model's id (registry name, HF id or path)
    dataset: str  # the dataset the library is for: its gold answers re-verify
    format: str = "jsonl"
    tokenizer: str | None = None  # the tokenizer the log-probs/token ids are on (None: model's)
    split: str | None = None
    data_dir: str | None = None
    dataset_options: Mapping[str, Any] = field(default_factory=dict)
    columns: Mapping[str, str] = field(default_factory=dict)  # role -> the file's column
    finish_reason: str | None = None  # every row's, when the file has no such column
    score_with: str | None = None  # score responses without log-probs with this model


@dataclass(frozen=True)
class ImportSummary:
    """What an import wrote and what it counted."""

    part: Path
    groups: int
    responses: int
    skipped_rows: int  # their prompt is not in the dataset
    reward_changed: int  # the file's reward differs from this project's verifier
    rescored: int
    missing_logprobs: int


def _jsonl_rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    from graft_env.data.files import read_jsonl

    return [(f"{path}:{line}", row) for line, row in read_jsonl(path)]


def _parquet_rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    if not path.is_file():
        raise LibraryError(f"{path} not found")
    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, pa.ArrowException) as error:
        raise LibraryError(f"{path}: not a readable Parquet file ({error})") from None
    return [(f"{path} row {i}", row) for i, row in enumerate(rows)]


READERS: dict[str, Callable[[Path], list[tuple[str, dict[str, Any]]]]] = {
    "jsonl": _jsonl_rows,
    "parquet": _parquet_rows,
}
"""File format -> reader: `(where, row)` per response, `where` naming the row in errors
(file:line), `row` a mapping from column names to values (CONTRIBUTING: adding one)."""


def _value(row: Mapping[str, Any], role: str, columns: Mapping[str, str], where: str) -> Any:
    """The row's value for `role` (None where the column is absent or null); the required
    roles must be non-empty strings."""
    value = row.get(columns.get(role, role))
    if role in ("prompt", "response") and not (isinstance(value, str) and value):
        raise LibraryError(
            f"{where}: column {columns.get(role, role)!r} ({role}) must be a non-empty string, "
            f"got {value!r}"
        )
    return value


def _logprobs(value: Any, token_ids: Any, where: str) -> np.ndarray | None:
    if value is None:
        return None
    try:
        logprobs = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        logprobs = np.empty(0)
    if logprobs.ndim != 1 or logprobs.size == 0 or not np.isfinite(logprobs).all():
        raise LibraryError(f"{where}: log-probs must be a non-empty list of finite numbers")
    if token_ids is not None and len(token_ids) != logprobs.size:
        raise LibraryError(f"{where}: {len(token_ids)} token ids and {logprobs.size} log-probs")
    return logprobs


def _finish_reason(value: Any, default: str | None, where: str, column: str) -> str:
    reason = default if value is None else value
    if reason is None:
        raise LibraryError(
            f"{where}: no finish reason (column {column!r}); give one for the whole file "
            f"(--finish-reason {'|'.join(FINISH_REASONS)}): it decides whether the receiver "
            "appends its EOS after the response"
        )
    if reason not in FINISH_REASONS:
        raise LibraryError(f"{where}: finish reason {reason!r} is not one of {FINISH_REASONS}")
    return reason


def _number(value: Any, role: str, where: str, integer: bool) -> float | int | None:
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (integer and value != int(value)):
        kind = "an integer" if integer else "a number"
        raise LibraryError(f"{where}: {role} must be {kind}, got {value!r}")
    return int(value) if integer else float(value)


def _score(model: str, prompts: Sequence[str], texts: Sequence[str], reasons: Sequence[str]):
    """The responses' token ids and log-probs under `model` (its own prompt format)."""
    from graft_env.policies import load_policy

    policy = load_policy(model)
    formatted = [policy.format_prompt(prompt) for prompt in prompts]
    return policy.score(formatted, list(texts), list(reasons))


def _response(row: Mapping[str, Any], where: str, spec: ImportSpec) -> dict[str, Any]:
    """One row's response, its fields checked."""
    cols = spec.columns
    token_ids = _value(row, "token_ids", cols, where)
    logprobs = _logprobs(_value(row, "logprobs", cols, where), token_ids, where)
    return {
        "key": prompt_key(_value(row, "prompt", cols, where)),
        "text": _value(row, "response", cols, where),
        "token_ids": None if token_ids is None else [int(t) for t in token_ids],
        "logprobs": logprobs,
        "origin": "missing" if logprobs is None else "generation",
        "finish_reason": _finish_reason(
            _value(row, "finish_reason", cols, where),
            spec.finish_reason,
            where,
            cols.get("finish_reason", "finish_reason"),
        ),
        "claimed": _number(_value(row, "reward", cols, where), "reward", where, integer=False),
        "step": _number(_value(row, "step", cols, where), "step", where, integer=True),
        "time": _number(_value(row, "time", cols, where), "time", where, integer=False),
        "prompt_id": _value(row, "prompt_id", cols, where),
        "group": _value(row, "group", cols, where),
    }


def import_rollouts(
    spec: ImportSpec, out: str | os.PathLike, append: bool = False
) -> ImportSummary:
    """Import `spec.path` into the library `out` (new, or a new part with `append`)."""
    from graft_env.data import load
    from graft_env.rewards import verify_batch

    unknown = sorted(set(spec.columns) - set(ROLES))
    if unknown:
        raise LibraryError(f"unknown column role(s) {unknown}; valid: {', '.join(ROLES)}")
    if spec.format not in READERS:
        raise LibraryError(f"unknown import format {spec.format!r}; valid: {', '.join(READERS)}")
    path = Path(spec.path).resolve()
    rows = READERS[spec.format](path)
    problems = {}
    for problem in load(spec.dataset, spec.split, spec.data_dir, **spec.dataset_options):
        problems.setdefault(prompt_key(problem.problem), problem)
    parsed = [_response(row, where, spec) for where, row in rows]
    responses = [r for r in parsed if r["key"] in problems]
    if not responses:
        raise LibraryError(
            f"{path}: none of its {len(rows)} rows is a problem of {spec.dataset}"
            f"{'/' + spec.split if spec.split else ''} (matched by normalised problem text)"
        )
    verdicts = verify_batch(
        [r["text"] for r in responses], [problems[r["key"]].answer for r in responses]
    )
    unscored = [r for r in responses if r["logprobs"] is None]
    if unscored and spec.score_with:
        scored = _score(
            spec.score_with,
            [problems[r["key"]].problem for r in unscored],
            [r["text"] for r in unscored],
            [r["finish_reason"] for r in unscored],
        )
        for r, item in zip(unscored, scored, strict=True):
            r.update(token_ids=list(item.token_ids), logprobs=item.logprobs, origin="rescored")
    groups: dict[tuple, list[int]] = {}
    for j, r in enumerate(responses):
        groups.setdefault((r["key"], r["step"], r["group"]), []).append(j)
    mtime = path.stat().st_mtime
    library_groups = []
    for number, members in enumerate(groups.values()):
        first, problem = responses[members[0]], problems[responses[members[0]]["key"]]
        library_groups.append(
            LibraryGroup(
                group_id=f"{path}#{number}",
                key=first["key"],
                problem=problem.problem,
                dataset=f"{spec.dataset}/{spec.split}" if spec.split else spec.dataset,
                prompt_id=first["prompt_id"] or problem.id,
                source=str(path),
                agent=None,
                model_id=spec.model,
                tokenizer_id=spec.tokenizer or spec.model,
                step=first["step"],
                generated_at=mtime if first["time"] is None else first["time"],
                texts=[responses[j]["text"] for j in members],
                token_ids=[responses[j]["token_ids"] for j in members],
                logprobs=[responses[j]["logprobs"] for j in members],
                logprob_origins=[responses[j]["origin"] for j in members],
                finish_reasons=[responses[j]["finish_reason"] for j in members],
                rewards=np.array([verdicts[j].reward for j in members]),
                statuses=[verdicts[j].status for j in members],
            )
        )
    return ImportSummary(
        part=write_library(library_groups, out, append),
        groups=len(library_groups),
        responses=len(responses),
        skipped_rows=len(rows) - len(responses),
        reward_changed=sum(
            r["claimed"] is not None and r["claimed"] != v.reward
            for r, v in zip(responses, verdicts, strict=True)
        ),
        rescored=len(unscored) if spec.score_with else 0,
        missing_logprobs=0 if spec.score_with else len(unscored),
    )
