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
Scores come from the source model only: the library records one model per group, whose
generation the log-probs stand for.
"""

from __future__ import annotations

import dataclasses
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
from graft_env.types import FINISH_REASONS

ROLES = (
    "prompt", "response", "logprobs", "token_ids", "finish_reason", "reward", "prompt_id",
    "step", "time", "group",
)  # fmt: skip
"""What a column can hold; prompt and response are required, the others optional.
`time` is when the response was generated, in Unix seconds (default: the file's mtime; a
group is as old as its latest response, when it was complete, as a run's stored group is
as old as its step's file); `group` separates several groups of one prompt and step (rows
of one prompt, step and group form one group, in file order: without step and group
columns, every row of a prompt is one group, whose size `graft library show` gives)."""


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
    score_with: str | None = None  # score responses without log-probs: the source model


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
(file:line), `row` a mapping from column names to values (CONTRIBUTING: adding one). The
file exists when a reader is called."""


def _value(row: Mapping[str, Any], role: str, columns: Mapping[str, str], where: str) -> Any:
    """The row's value for `role` (None where the column is absent or null); the prompt must
    be a non-empty string, the response a string (empty where the model stopped at once: a
    run's store keeps such responses too)."""
    value = row.get(columns.get(role, role))
    if role == "prompt" and not (isinstance(value, str) and value):
        raise LibraryError(
            f"{where}: column {columns.get(role, role)!r} ({role}) must be a non-empty string, "
            f"got {value!r}"
        )
    if role == "response" and not isinstance(value, str):
        raise LibraryError(
            f"{where}: column {columns.get(role, role)!r} ({role}) must be a string, got {value!r}"
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


@dataclass(frozen=True)
class _Response:
    """One row's response, its fields checked."""

    key: str  # prompt_key of the row's problem text
    text: str
    token_ids: list[int] | None
    logprobs: np.ndarray | None
    origin: str  # one of LOGPROB_ORIGINS
    finish_reason: str
    claimed: float | None  # the file's reward, compared with the verifier's
    step: int | None
    time: float | None
    prompt_id: str | None
    group: Any  # the file's group id (any hashable value), None where it has none


def _response(row: Mapping[str, Any], where: str, spec: ImportSpec) -> _Response:
    cols = spec.columns
    token_ids = _value(row, "token_ids", cols, where)
    logprobs = _logprobs(_value(row, "logprobs", cols, where), token_ids, where)
    prompt_id = _value(row, "prompt_id", cols, where)
    return _Response(
        key=prompt_key(_value(row, "prompt", cols, where)),
        text=_value(row, "response", cols, where),
        token_ids=None if token_ids is None else [int(t) for t in token_ids],
        logprobs=logprobs,
        origin="missing" if logprobs is None else "generation",
        finish_reason=_finish_reason(
            _value(row, "finish_reason", cols, where),
            spec.finish_reason,
            where,
            cols.get("finish_reason", "finish_reason"),
        ),
        claimed=_number(_value(row, "reward", cols, where), "reward", where, integer=False),
        step=_number(_value(row, "step", cols, where), "step", where, integer=True),
        time=_number(_value(row, "time", cols, where), "time", where, integer=False),
        prompt_id=None if prompt_id is None else str(prompt_id),
        group=_value(row, "group", cols, where),
    )


def _check_spec(spec: ImportSpec) -> None:
    """What the spec alone can get wrong, before any file is read or model loads."""
    unknown = sorted(set(spec.columns) - set(ROLES))
    if unknown:
        raise LibraryError(f"unknown column role(s) {unknown}; valid: {', '.join(ROLES)}")
    if spec.format not in READERS:
        raise LibraryError(f"unknown import format {spec.format!r}; valid: {', '.join(READERS)}")
    if spec.score_with is not None and spec.score_with != spec.model:
        raise LibraryError(
            f"--score-with {spec.score_with}: responses are scored with their source model "
            f"(--model {spec.model}) only, whose generation their log-probs stand for in the "
            "compatibility score"
        )
    if spec.score_with is not None and spec.tokenizer not in (None, spec.model):
        raise LibraryError(
            f"--tokenizer {spec.tokenizer}: --score-with gives the source model's own token "
            "ids; leave --tokenizer unset"
        )


def _matched(
    responses: Sequence[_Response], problems: Mapping[str, Any], spec: ImportSpec, path: Path
) -> list[_Response]:
    """The responses to problems of the dataset; none is a one-line error."""
    matched = [r for r in responses if r.key in problems]
    if not matched:
        raise LibraryError(
            f"{path}: none of its {len(responses)} rows is a problem of {spec.dataset}"
            f"{'/' + spec.split if spec.split else ''} (matched by normalised problem text)"
        )
    return matched


def _score_missing(
    responses: Sequence[_Response], problems: Mapping[str, Any], model: str
) -> list[_Response]:
    """`responses` with those lacking log-probs scored with the source `model`."""
    out = list(responses)
    unscored = [j for j, r in enumerate(responses) if r.logprobs is None]
    if not unscored:
        return out  # no model to load
    scored = _score(
        model,
        [problems[responses[j].key].problem for j in unscored],
        [responses[j].text for j in unscored],
        [responses[j].finish_reason for j in unscored],
    )
    for j, item in zip(unscored, scored, strict=True):
        out[j] = dataclasses.replace(
            out[j], token_ids=list(item.token_ids), logprobs=item.logprobs, origin="rescored"
        )
    return out


def _groups(
    responses: Sequence[_Response],
    verdicts: Sequence[Any],
    problems: Mapping[str, Any],
    spec: ImportSpec,
    path: Path,
) -> list[LibraryGroup]:
    """The responses as groups: rows of one prompt, step and file group, in file order."""
    members: dict[tuple, list[int]] = {}
    for j, r in enumerate(responses):
        members.setdefault((r.key, r.step, r.group), []).append(j)
    mtime = path.stat().st_mtime
    groups = []
    for number, rows in enumerate(members.values()):
        first, problem = responses[rows[0]], problems[responses[rows[0]].key]
        times = [responses[j].time for j in rows if responses[j].time is not None]
        groups.append(
            LibraryGroup(
                group_id=f"{path}#{number}",
                key=first.key,
                problem=problem.problem,
                dataset=f"{spec.dataset}/{spec.split}" if spec.split else spec.dataset,
                prompt_id=first.prompt_id or problem.id,
                source=str(path),
                agent=None,
                model_id=spec.model,
                tokenizer_id=spec.tokenizer or spec.model,
                step=first.step,
                generated_at=max(times) if times else mtime,
                texts=[responses[j].text for j in rows],
                token_ids=[responses[j].token_ids for j in rows],
                logprobs=[responses[j].logprobs for j in rows],
                logprob_origins=[responses[j].origin for j in rows],
                finish_reasons=[responses[j].finish_reason for j in rows],
                rewards=np.array([verdicts[j].reward for j in rows]),
                statuses=[verdicts[j].status for j in rows],
            )
        )
    return groups


def import_rollouts(
    spec: ImportSpec, out: str | os.PathLike, append: bool = False
) -> ImportSummary:
    """Import `spec.path` into the library `out` (new, or a new part with `append`)."""
    from graft_env.data import load
    from graft_env.rewards import verify_batch

    _check_spec(spec)
    path = Path(spec.path).resolve()
    if not path.is_file():
        raise LibraryError(f"{path}: no such file to import")
    rows = READERS[spec.format](path)
    problems = {}
    for problem in load(spec.dataset, spec.split, spec.data_dir, **spec.dataset_options):
        problems.setdefault(prompt_key(problem.problem), problem)
    responses = _matched([_response(row, where, spec) for where, row in rows], problems, spec, path)
    verdicts = verify_batch(
        [r.text for r in responses], [problems[r.key].answer for r in responses]
    )
    unscored = sum(r.logprobs is None for r in responses)
    if spec.score_with:
        responses = _score_missing(responses, problems, spec.score_with)
    groups = _groups(responses, verdicts, problems, spec, path)
    return ImportSummary(
        part=write_library(groups, out, append),
        groups=len(groups),
        responses=len(responses),
        skipped_rows=len(rows) - len(responses),
        reward_changed=sum(
            r.claimed is not None and r.claimed != v.reward
            for r, v in zip(responses, verdicts, strict=True)
        ),
        rescored=unscored if spec.score_with else 0,
        missing_logprobs=0 if spec.score_with else unscored,
    )
