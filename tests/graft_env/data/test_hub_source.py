"""The Hub source and `graft data fetch`, without the network: `datasets.load_dataset` is
replaced by real `datasets.Dataset` objects holding rows in each Hub copy's own field names
(the Hub's aime25 says `problem` where the file says `question`, its Minerva copy has a
`question` and a final `answer` and no row numbers, GSM8K has no `idx`), so the mapping to
the reference layout, the row-count check, the digest comparison and the writing are the
real code's."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import datasets
import pytest

from benchmarks import cli
from graft_env.data import DatasetError, extract_last_boxed, files, load, read_jsonl
from graft_env.data.benchmarks import BENCHMARKS, BY_NAME, hub_row
from graft_env.data.fetch import fetch

# Each Hub copy's fields, made from a reference file's row: the inverse of `hub_row`.
HUB_FORMAT: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "math500": lambda r: {
        k: r[k] for k in ("problem", "solution", "answer", "subject", "level", "unique_id")
    },
    "aime24": lambda r: {
        **{k: r[k] for k in ("id", "problem", "solution", "answer", "url")},
        "year": "2024",
    },
    "aime25": lambda r: {"problem": r["question"], "answer": f"{r['answer']:g}", "id": r["id"]},
    "amc23": lambda r: {k: r[k] for k in ("id", "question", "answer", "url")},
    "minerva": lambda r: {"question": r["problem"], "answer": extract_last_boxed(r["solution"])},
    "math_train": lambda r: {k: r[k] for k in ("problem", "level", "solution", "type")},
    "gsm8k": lambda r: {"question": r["question"], "answer": r["answer"]},
}

HubRows = dict[tuple[str, str | None, str], list[dict[str, Any]]]


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[HubRows]:
    """The Hub as `datasets.load_dataset` sees it: (repo, config, split) -> rows, served as a
    `datasets.Dataset`; a split not in it is not on the Hub."""
    served: HubRows = {}

    def load_dataset(repo: str, config: str | None = None, *, split: str) -> datasets.Dataset:
        if (repo, config, split) not in served:
            raise FileNotFoundError(f"Dataset '{repo}' doesn't exist on the Hub")
        return datasets.Dataset.from_list(served[(repo, config, split)])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    yield served


def serve(hub: HubRows, name: str, split: str, rows: list[dict[str, Any]]) -> None:
    location = BY_NAME[name].hub[split]
    hub[(location.repo, location.config, location.split)] = rows


def aime24_rows(count: int = 30) -> list[dict[str, Any]]:
    """Hub-format AIME 2024 rows (not the real problems)."""
    return [
        {"id": 60 + i, "problem": f"Find {i}.", "solution": "...", "answer": f"{i:03d}",
         "url": "u", "year": "2024"}
        for i in range(count)
    ]  # fmt: skip


def test_the_hub_row_mapping_names_fields_as_the_reference_files_do() -> None:
    aime25 = hub_row(BY_NAME["aime25"], {"id": "3", "problem": "p", "answer": "70"}, 3)
    assert aime25 == {"id": "3", "question": "p", "answer": "70"}
    minerva = hub_row(BY_NAME["minerva"], {"question": "q", "answer": "7.2"}, 5)
    assert minerva == {"problem": "q", "answer": "7.2", "idx": 5}
    gsm8k = hub_row(BY_NAME["gsm8k"], {"question": "q", "answer": "#### 4"}, 9)
    assert gsm8k == {"question": "q", "answer": "#### 4", "idx": 9}
    both = {"problem": "p", "question": "q", "answer": "1"}  # nothing is overwritten
    assert hub_row(BY_NAME["aime25"], both, 0) == both
    assert hub_row(BY_NAME["math500"], {"problem": "p", "answer": "1"}, 2) == {
        "problem": "p",
        "answer": "1",
    }


def test_every_hub_copy_fetches_to_the_reference_problems(
    hub: HubRows, data_dir: Path, tmp_path: Path
) -> None:
    """Hub copies equal to the reference files fetch to files that load as the same problems,
    with the same ids, as the reference; the Hub source reads the same; each split's digest
    matches."""
    for benchmark in BENCHMARKS:
        for split, relative in benchmark.files.items():
            reference = [row for _, row in read_jsonl(data_dir / relative)]
            serve(hub, benchmark.name, split, [HUB_FORMAT[benchmark.name](r) for r in reference])
    said: list[str] = []
    done = fetch((), tmp_path / "fetched", report=said.append)
    assert [(d.name, d.split, d.written, d.matches) for d in done] == [
        (b.name, split, True, True) for b in BENCHMARKS for split in b.files
    ]
    assert said[0] == "[1/8] math500 test: reading hub dataset HuggingFaceH4/MATH-500 (test)"
    assert said[1].startswith("[1/8] math500 test: wrote 500 rows (the reference file's count)")
    assert said[1].endswith("same problems and answers as the reference file")
    for benchmark in BENCHMARKS:
        for split in benchmark.files:
            ours = load(benchmark.name, split, data_dir=data_dir, source="files")
            fetched = load(benchmark.name, split, data_dir=tmp_path / "fetched", source="files")
            from_hub = load(benchmark.name, split, data_dir=data_dir, source="hub")
            texts = [[(p.id, p.problem, p.answer) for p in ps] for ps in (fetched, from_hub)]
            assert texts[0] == texts[1] == [(p.id, p.problem, p.answer) for p in ours]


def test_a_short_hub_copy_writes_nothing(hub: HubRows, tmp_path: Path) -> None:
    serve(hub, "aime24", "test", aime24_rows(29))
    with pytest.raises(DatasetError) as error:
        fetch(["aime24"], tmp_path, report=lambda line: None)
    assert str(error.value) == (
        "aime24 (test): hub dataset HuggingFaceH4/aime_2024 (train) has 29 rows, the "
        "reference file aime24/test.jsonl has 30; nothing written"
    )
    assert list(tmp_path.rglob("*.jsonl*")) == []


def test_a_differing_copy_is_written_and_said_to_differ(hub: HubRows, tmp_path: Path) -> None:
    serve(hub, "aime24", "test", aime24_rows())
    said: list[str] = []
    (done,) = fetch(["aime24"], tmp_path, report=said.append)
    assert (done.written, done.rows, done.matches) == (True, 30, False)
    assert "problems or answers differ from the reference file's" in said[-1]
    rows = [
        json.loads(line) for line in (tmp_path / "aime24" / "test.jsonl").read_text().splitlines()
    ]
    assert rows == aime24_rows()  # the Hub's rows in the reference layout, nothing dropped
    assert [p.answer for p in load("aime24", data_dir=tmp_path)][:3] == ["0", "1", "2"]


def test_a_present_file_is_kept_unless_forced(hub: HubRows, tmp_path: Path) -> None:
    serve(hub, "aime24", "test", aime24_rows())
    target = tmp_path / "aime24" / "test.jsonl"
    target.parent.mkdir()
    target.write_text('{"id": 1, "problem": "mine", "answer": "1"}\n')
    said: list[str] = []
    (kept,) = fetch(["aime24"], tmp_path, report=said.append)
    assert (kept.written, kept.matches) == (False, None)
    assert said == [f"[1/1] aime24 test: {target} is there, kept (--force downloads it again)"]
    (forced,) = fetch(["aime24"], tmp_path, force=True, report=said.append)
    assert forced.written and len(target.read_text().splitlines()) == 30
    assert not list(tmp_path.rglob(".*.partial"))


def test_unknown_names_and_an_unreachable_hub_are_one_line(hub: HubRows, tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"no Hub copy of dataset 'aime2024'.*did you mean"):
        fetch(["aime2024"], tmp_path)
    with pytest.raises(DatasetError) as error:
        fetch(["math500"], tmp_path, report=lambda line: None)
    message = str(error.value)
    assert message.startswith(
        "math500 (test): cannot read HuggingFaceH4/MATH-500 (test) from the Hugging Face Hub "
        "(FileNotFoundError: Dataset 'HuggingFaceH4/MATH-500' doesn't exist on the Hub); "
        "point --data-dir"
    )
    assert "`graft data fetch`" in message and "\n" not in message


def test_auto_reads_the_file_when_there_else_the_hub(
    hub: HubRows, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "local", "answer": "#### 1"}\n')
    serve(hub, "gsm8k", "test", [{"question": "hub", "answer": "#### 2"}])
    serve(hub, "aime24", "test", aime24_rows())
    assert [p.problem for p in load("gsm8k", "test", data_dir=tmp_path)] == ["local"]
    assert [p.problem for p in load("gsm8k", "test", data_dir=tmp_path, source="hub")] == ["hub"]
    # a named directory without the file: an error naming it, never a silent switch
    for source in ("auto", "files"):
        with pytest.raises(DatasetError, match=r"aime24/test\.jsonl' not found"):
            load("aime24", data_dir=tmp_path, source=source)
    # nothing named and no default directory: the Hub
    monkeypatch.delenv("GRAFT_DATA_DIR", raising=False)
    monkeypatch.setenv("GRAFT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(files, "CHECKOUT_DATA_DIR", tmp_path / "checkout-data")
    assert [p.problem for p in load("gsm8k", "test")] == ["hub"]
    assert len(load("aime24")) == 30
    # each split from the first default directory that holds it: a checkout's data without
    # gsm8k, and the fetched copy in the cache
    (tmp_path / "checkout-data" / "aime24").mkdir(parents=True)
    fetched = tmp_path / "cache" / "data" / "gsm8k"
    fetched.mkdir(parents=True)
    (fetched / "test.jsonl").write_text('{"question": "fetched", "answer": "#### 3"}\n')
    assert [p.problem for p in load("gsm8k", "test")] == ["fetched"]


def test_graft_data_fetch_writes_where_the_loaders_look(
    hub: HubRows, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Without --data-dir the files go to the graft cache's data/, which every loader then
    finds when nothing else is named."""
    monkeypatch.delenv("GRAFT_DATA_DIR", raising=False)
    monkeypatch.setenv("GRAFT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(files, "CHECKOUT_DATA_DIR", tmp_path / "no-checkout-data")
    serve(hub, "aime24", "test", aime24_rows())
    assert cli.main(["data", "fetch", "aime24"]) == 0
    out = capsys.readouterr().out.splitlines()
    written = tmp_path / "cache" / "data" / "aime24" / "test.jsonl"
    assert out[0] == "[1/1] aime24 test: reading hub dataset HuggingFaceH4/aime_2024 (train)"
    assert out[1].startswith(
        f"[1/1] aime24 test: wrote 30 rows (the reference file's count) to {written};"
    )
    assert out[2] == "differ from the reference files: aime24 test"
    hub.clear()  # from here on only the written file can answer
    assert cli.main(["data", "show", "aime24", "--source", "files", "--limit", "1"]) == 0
    assert capsys.readouterr().out.startswith("aime24: 30 problems\n\n[aime24/test/60] gold: 0\n")


def test_the_reference_layout_is_recorded_for_every_split() -> None:
    for benchmark in BENCHMARKS:
        assert set(benchmark.files) == set(benchmark.hub) == set(benchmark.reference)
        assert all(len(ref.digest) == 64 for ref in benchmark.reference.values())
