"""Turn one raw benchmark row into a `Problem`.

The published files disagree (see the data README): the question is `problem` or
`question`; the gold answer is an `answer` field (a string, or a JSON float such as
`27.0` for an integer), the last `\\boxed{}` of `solution` (MATH train, Minerva), or
the text after `####` (GSM8K). One function handles every row, from a file or from
the hub, so both sources give identical problems.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from graft_env.data.boxed import extract_last_boxed
from graft_env.data.problem import DatasetError, Problem

# Source ids, in order of preference; the row index is used when none is present.
ID_FIELDS = ("unique_id", "id", "idx")
_INTEGER_VALUED = re.compile(r"([-+]?\d+)(?:\.0*)?")
# GSM8K writes 1,234: drop only commas that group digits in threes.
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
GSM8K_MARKER = "####"


def normalise_row(
    row: Mapping[str, Any],
    *,
    dataset: str,
    split: str,
    index: int,
    where: str,
    answer_after_marker: bool = False,
    errata: Mapping[str, str] | None = None,
) -> Problem:
    """Build the `Problem` for `row`, the `index`-th row of `dataset`/`split`.

    `where` (e.g. "path:line") prefixes every error. With `answer_after_marker`
    (GSM8K) the `answer` field is a worked solution ending in `#### N`: it is kept
    as `extra["solution"]` and N, without thousands commas, is the gold answer.
    `extra["raw_answer"]` always holds the gold answer as the source wrote it.
    Integer-valued answers are written canonically ("27.0" and "025" become "27"
    and "25"); every other answer is kept verbatim, only stripped.

    `errata` maps the start of a problem's text to its gold answer, used only when
    the source's final box is empty (a known defect of a published file); such a
    problem is marked with `extra["erratum"]`, so the correction is never silent.
    """
    text_field = "problem" if "problem" in row else "question"
    problem_text = _required_string(row, text_field, where, alias="problem' or 'question")
    extra = {key: value for key, value in row.items() if key != text_field}

    if answer_after_marker:
        solution = _required_string(row, "answer", where)
        if GSM8K_MARKER not in solution:
            raise DatasetError(f"{where}: field 'answer' has no '{GSM8K_MARKER}' final answer")
        if "solution" in row:
            raise DatasetError(f"{where}: row has both a 'solution' and a '####' answer")
        raw_answer = solution.rsplit(GSM8K_MARKER, 1)[1].strip()
        answer = _THOUSANDS_COMMA.sub("", raw_answer)
        del extra["answer"]
        extra["solution"] = solution
    elif "answer" in row:
        raw_answer = _answer_text(row["answer"], where)
        answer = raw_answer
        del extra["answer"]
    else:
        solution = _required_string(row, "solution", where, alias="answer' or 'solution")
        boxed = extract_last_boxed(solution)
        if boxed is None:
            raise DatasetError(
                f"{where}: field 'solution' has no complete \\boxed{{...}} final answer"
            )
        raw_answer = boxed.strip()
        answer = raw_answer or _erratum(problem_text, errata or {}, where)
        if answer != raw_answer:
            extra["erratum"] = "the source's \\boxed{} is empty; gold answer from the errata"

    answer = _canonical_integer(answer)
    if not answer:
        raise DatasetError(f"{where}: gold answer is empty")
    extra["raw_answer"] = raw_answer
    return Problem(
        id=f"{dataset}/{split}/{_source_id(row, index, where)}",
        problem=problem_text.strip(),
        answer=answer,
        dataset=dataset,
        extra=extra,
    )


def _erratum(problem_text: str, errata: Mapping[str, str], where: str) -> str:
    for text_start, answer in errata.items():
        if problem_text.startswith(text_start):
            return answer
    raise DatasetError(f"{where}: the final \\boxed{{}} of field 'solution' is empty")


def _required_string(
    row: Mapping[str, Any], name: str, where: str, alias: str | None = None
) -> str:
    if name not in row:
        raise DatasetError(f"{where}: missing field '{alias or name}'")
    value = row[name]
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: field '{name}' must be a non-empty string, got {value!r}")
    return value


def _answer_text(value: Any, where: str) -> str:
    """The `answer` field as the file wrote it: JSON numbers keep their JSON text."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise DatasetError(f"{where}: field 'answer' is not a finite number: {value!r}")
        return json.dumps(value)
    raise DatasetError(
        f"{where}: field 'answer' must be a string or a number, got {type(value).__name__}"
    )


def _canonical_integer(answer: str) -> str:
    match = _INTEGER_VALUED.fullmatch(answer)
    return str(int(match.group(1))) if match else answer


def _source_id(row: Mapping[str, Any], index: int, where: str) -> str:
    for name in ID_FIELDS:
        if name not in row:
            continue
        value = row[name]
        if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
            raise DatasetError(
                f"{where}: id field '{name}' must be a non-empty string or integer, got {value!r}"
            )
        return str(value)
    return str(index)
