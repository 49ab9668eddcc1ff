"""Real benchmark files: row counts, normalisation, and clear errors for bad data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from graft_env.data import DatasetError, Problem, available, files, load, resolve_data_dir

EXPECTED_ROWS = [
    ("math500", "test", 500),
    ("aime24", "test", 30),
    ("aime25", "test", 30),
    ("amc23", "test", 40),
    ("minerva", "test", 272),
    ("math_train", "train", 7500),
    ("gsm8k", "train", 7473),
    ("gsm8k", "test", 1319),
]

_cache: dict[tuple[str, str], list[Problem]] = {}


def _load(name: str, split: str, data_dir: Path) -> list[Problem]:
    """Each real split is parsed once per test session: math_train is 6 MB."""
    if (name, split) not in _cache:
        _cache[(name, split)] = load(name, split, data_dir=data_dir)
    return _cache[(name, split)]


@pytest.mark.parametrize(("name", "split", "rows"), EXPECTED_ROWS)
def test_row_counts_answers_and_ids(name: str, split: str, rows: int, data_dir: Path) -> None:
    problems = _load(name, split, data_dir)
    assert len(problems) == rows
    assert all(p.dataset == name and p.problem.strip() and p.answer.strip() for p in problems)
    assert all(p.id.startswith(f"{name}/{split}/") for p in problems)
    assert len({p.id for p in problems}) == rows
    assert all("raw_answer" in p.extra for p in problems)


def test_default_splits_and_env_var(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAFT_DATA_DIR", str(data_dir))
    assert load("aime24") == _load("aime24", "test", data_dir)
    assert load("math_train")[0].id == "math_train/train/0"
    assert load("gsm8k")[0].id == "gsm8k/test/0"


def test_float_answers_become_integers(data_dir: Path) -> None:
    first = _load("amc23", "test", data_dir)[0]
    assert (first.answer, first.extra["raw_answer"]) == ("27", "27.0")
    assert first.problem.startswith("Cities $A$ and $B$ are $45$ miles apart.")
    aime25 = _load("aime25", "test", data_dir)[1]  # only a `question` field
    assert (aime25.id, aime25.answer, aime25.extra["raw_answer"]) == (
        "aime25/test/1",
        "588",
        "588.0",
    )
    assert "question" not in aime25.extra
    padded = [p for p in _load("aime24", "test", data_dir) if p.extra["raw_answer"] == "025"]
    assert [p.answer for p in padded] == ["25"]


def test_math500_keeps_latex_answers_and_source_ids(data_dir: Path) -> None:
    first = _load("math500", "test", data_dir)[0]
    assert first.id == "math500/test/test/precalculus/807.json"
    assert first.answer == r"\left( 3, \frac{\pi}{2} \right)"
    assert (first.extra["subject"], first.extra["level"]) == ("Precalculus", 2)
    lists = [p.answer for p in _load("math500", "test", data_dir) if p.answer == "-2,1"]
    assert lists == ["-2,1"]  # a list of roots, not a number with a thousands comma


def test_boxed_answers_from_solutions(data_dir: Path) -> None:
    minerva = _load("minerva", "test", data_dir)[0]
    assert (minerva.answer, minerva.id) == ("1.6", "minerva/test/0")
    math_train = _load("math_train", "train", data_dir)
    assert (math_train[888].answer, math_train[1011].answer) == ("2", "9")  # `\boxed 2$.`
    corrected = [(i, p.answer) for i, p in enumerate(math_train) if "erratum" in p.extra]
    assert corrected == [(5341, "0"), (5343, "0")]
    assert math_train[5341].extra["raw_answer"] == ""


def test_gsm8k_answer_after_marker_without_commas(data_dir: Path) -> None:
    problems = _load("gsm8k", "train", data_dir)
    first = problems[0]
    assert first.answer == "72" and first.extra["solution"].endswith("#### 72")
    with_commas = [p for p in problems if "," in p.extra["raw_answer"]]
    assert with_commas
    for problem in with_commas:
        assert problem.answer == problem.extra["raw_answer"].replace(",", "")
        assert problem.answer.lstrip("-").isdigit()


def _write(root: Path, relative: str, lines: list[str]) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _row(**fields: object) -> str:
    return json.dumps(fields)


@pytest.mark.parametrize(
    ("name", "relative", "lines", "message"),
    [
        ("math500", "math500/test.jsonl", [_row(problem="p", answer="1"), "{not json"],
         r"test\.jsonl:2: invalid JSON"),
        ("math500", "math500/test.jsonl", ["", _row(problem="p", answer="1"), "", "[1, 2]"],
         r"test\.jsonl:4: expected a JSON object"),
        ("amc23", "amc23/test.jsonl", [_row(id=1, answer=3.0)],
         r"test\.jsonl:1: missing field 'problem' or 'question'"),
        ("amc23", "amc23/test.jsonl", [_row(id=1, question="q", answer=[3])],
         r"test\.jsonl:1: field 'answer' must be a string or a number"),
        ("math500", "math500/test.jsonl", [_row(problem="p", answer="  ")],
         r"test\.jsonl:1: gold answer is empty"),
        ("minerva", "minerva_math/test.jsonl", [_row(problem="p", solution="x = 1")],
         r"test\.jsonl:1: field 'solution' has no complete \\boxed"),
        ("minerva", "minerva_math/test.jsonl", [_row(problem="p", solution=r"so \boxed{}")],
         r"test\.jsonl:1: the final \\boxed\{\} of field 'solution' is empty"),
        ("minerva", "minerva_math/test.jsonl", [_row(problem="p")],
         r"test\.jsonl:1: missing field 'answer' or 'solution'"),
        ("gsm8k", "gsm8k/test.jsonl", [_row(question="q", answer="it is 5")],
         r"test\.jsonl:1: field 'answer' has no '####'"),
        ("aime24", "aime24/test.jsonl", [_row(id=7, problem="a", answer="1"),
                                         _row(id=7, problem="b", answer="2")],
         r"test\.jsonl:2: duplicate id 'aime24/test/7' \(first at .*test\.jsonl:1\)"),
        ("aime24", "aime24/test.jsonl", [_row(id=None, problem="a", answer="1")],
         r"test\.jsonl:1: id field 'id' must be"),
        ("aime24", "aime24/test.jsonl", ["", "  "], r"test\.jsonl: no rows"),
    ],
)  # fmt: skip
def test_malformed_rows_name_file_and_line(
    tmp_path: Path, name: str, relative: str, lines: list[str], message: str
) -> None:
    _write(tmp_path, relative, lines)
    with pytest.raises(DatasetError, match=message):
        load(name, data_dir=tmp_path)


def test_rows_without_ids_use_their_index(tmp_path: Path) -> None:
    _write(tmp_path, "gsm8k/test.jsonl", [_row(question="q", answer="5 #### 1,234,567")] * 2)
    problems = load("gsm8k", "test", data_dir=tmp_path)
    assert [p.id for p in problems] == ["gsm8k/test/0", "gsm8k/test/1"]
    assert problems[0].answer == "1234567"


def test_missing_directory_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRAFT_DATA_DIR", raising=False)
    monkeypatch.setenv("GRAFT_CACHE_DIR", str(tmp_path / "cache"))  # no fetched data either
    monkeypatch.setattr(files, "CHECKOUT_DATA_DIR", tmp_path / "no-checkout-data")
    for attempt in (resolve_data_dir, lambda: load("math500", source="files")):
        with pytest.raises(DatasetError) as error:
            attempt()
        message = str(error.value)
        assert message.startswith("no data directory: point --data-dir (data_dir=...) or $GRAFT")
        assert f"`graft data fetch` (into {tmp_path / 'cache' / 'data'};" in message
    with pytest.raises(DatasetError, match=r"'.*nowhere' \(from data_dir\) does not exist"):
        load("math500", data_dir=tmp_path / "nowhere")  # auto too: a typo never goes to the Hub
    monkeypatch.setenv("GRAFT_DATA_DIR", str(tmp_path / "gone"))
    with pytest.raises(DatasetError, match=r"gone' \(from \$GRAFT_DATA_DIR\) does not exist"):
        resolve_data_dir()
    with pytest.raises(DatasetError, match=r"dataset file '.*math500/test\.jsonl' not found"):
        load("math500", data_dir=tmp_path, source="files")
    assert resolve_data_dir(tmp_path) == tmp_path


def test_without_a_setting_every_loader_finds_the_checkout_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`graft data show math500` (and every command) looks where the error message said."""
    monkeypatch.delenv("GRAFT_DATA_DIR", raising=False)
    _write(tmp_path, "gsm8k/test.jsonl", [_row(question="q", answer="#### 7")])
    monkeypatch.setattr(files, "CHECKOUT_DATA_DIR", tmp_path)
    assert resolve_data_dir() == tmp_path
    assert [p.answer for p in load("gsm8k", "test")] == ["7"]


def test_unknown_name_split_option_and_source(data_dir: Path) -> None:
    with pytest.raises(DatasetError) as unknown:
        load("math5000", data_dir=data_dir)
    assert all(name in str(unknown.value) for name in available())
    with pytest.raises(DatasetError, match=r"no split 'train'; valid splits: \['test'\]"):
        load("math500", "train", data_dir=data_dir)
    with pytest.raises(DatasetError, match=r"unknown option\(s\) \['sauce'\]; .*'source'"):
        load("math500", data_dir=data_dir, sauce="hub")
    with pytest.raises(DatasetError, match=r"source must be one of \['auto', 'files', 'hub'\]"):
        load("math500", data_dir=data_dir, source="web")


def test_hub_source_without_datasets_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(DatasetError) as error:
        load("gsm8k", "train", source="hub")
    message = str(error.value)
    assert message.startswith("gsm8k (train): no local file, and reading the Hub copy needs the")
    assert "--data-dir" in message and "`graft data fetch`" in message and "\n" not in message
