"""The registry: registering loaders, option checks, unique ids, the Problem record."""

from __future__ import annotations

import pickle

import pytest

from graft_env.data import DatasetError, Problem, available, load, register_dataset, registry

BUILT_IN = ["aime24", "aime25", "amc23", "gsm8k", "math500", "math_train", "minerva", "procedural"]


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register test datasets in a copy, so they vanish after the test."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def _problems(split: str, count: int, prefix: str = "toy") -> list[Problem]:
    return [Problem(f"{prefix}/{split}/{i}", f"What is {i}?", str(i), "toy") for i in range(count)]


def test_built_in_datasets_are_registered() -> None:
    assert available() == BUILT_IN


@pytest.mark.usefixtures("scratch_registry")
def test_register_and_load_with_options() -> None:
    calls = []

    @register_dataset("toy", splits=["train", "test"], default_split="test")
    def load_toy(split: str, data_dir: object, count: int = 2) -> list[Problem]:
        calls.append((split, data_dir, count))
        return _problems(split, count)

    assert "toy" in available()
    assert [p.id for p in load("toy")] == ["toy/test/0", "toy/test/1"]
    assert len(load("toy", "train", data_dir="somewhere", count=3)) == 3
    assert calls == [("test", None, 2), ("train", "somewhere", 3)]
    with pytest.raises(
        DatasetError, match=r"unknown option\(s\) \['size'\]; valid options: \['count'\]"
    ):
        load("toy", size=3)


@pytest.mark.usefixtures("scratch_registry")
def test_loader_taking_any_option_checks_its_own() -> None:
    @register_dataset("free", splits=["test"], default_split="test")
    def load_free(split: str, data_dir: object, **options: int) -> list[Problem]:
        return _problems(split, options.pop("count"))

    assert len(load("free", count=4)) == 4


@pytest.mark.usefixtures("scratch_registry")
def test_duplicate_ids_from_a_loader_are_rejected() -> None:
    @register_dataset("twice", splits=["test"], default_split="test")
    def load_twice(split: str, data_dir: object) -> list[Problem]:
        return _problems(split, 2) + _problems(split, 1)

    with pytest.raises(DatasetError, match=r"duplicate id 'toy/test/0' at item 2"):
        load("twice")


@pytest.mark.usefixtures("scratch_registry")
def test_bad_registrations() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_dataset("math500", splits=["test"], default_split="test")(lambda s, d: [])
    with pytest.raises(ValueError, match=r"default_split 'dev' is not one of \('test',\)"):
        register_dataset("new", splits=["test"], default_split="dev")
    with pytest.raises(ValueError, match="splits must not be empty"):
        register_dataset("new", splits=[], default_split="test")
    with pytest.raises(TypeError, match=r"loader must take \(split, data_dir"):
        register_dataset("new", splits=["test"], default_split="test")(lambda split: [])
    assert "new" not in available()


def test_problem_validates_hashes_and_pickles() -> None:
    problem = Problem("toy/test/0", "What is 1+1?", "2", "toy", {"level": 1})
    assert pickle.loads(pickle.dumps(problem)) == problem
    assert len({problem, Problem("toy/test/0", "What is 1+1?", "2", "toy", {"level": 1})}) == 1
    assert problem != Problem("toy/test/0", "What is 1+1?", "2", "toy", {"level": 2})
    with pytest.raises(ValueError, match=r"Problem\.answer must be a non-empty string"):
        Problem("toy/test/0", "What is 1+1?", " ", "toy")
    with pytest.raises(ValueError, match=r"Problem\.id must be a non-empty string"):
        Problem(3, "What is 1+1?", "2", "toy")  # type: ignore[arg-type]
