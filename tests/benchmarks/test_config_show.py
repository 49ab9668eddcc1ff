"""`graft config show`: grouped by section and strategy, wrapped to the terminal, filtered by
`--section` / `--strategy`, and `--format json` that round-trips to the schema rows."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest

from algorithms.config import AlgorithmConfig, option_fields
from algorithms.exchange import available_strategies, make_strategy
from algorithms.exchange.graft import GraftOptions
from algorithms.exchange.hacpo import HacpoOptions
from algorithms.exchange.sgt import SgtOptions
from algorithms.storage.yaml_schema import SchemaRow, schema_rows
from algorithms.training.run_config import EnvSection, TrainConfig
from benchmarks import cli
from benchmarks.commands.config_show import option_strategies


def readers(option: str) -> list[str]:
    """The registered strategies whose class reads `option` (a GRAFT variant reads GRAFT's):
    the registry's answer, so a strategy module added to the package changes no test here."""
    return [
        name
        for name in available_strategies()
        if option in type(make_strategy(AlgorithmConfig(exchange=name))).option_names()
    ]


def _title(option: str) -> str:
    owners = ", ".join(repr(name) for name in readers(option))
    return f"algorithm_options (strategy {owners})"


def _heading(lines: list[str]) -> str:
    """A group's title, its wrapped lines (indented, before the first key) joined."""
    indented = itertools.takewhile(lambda line: line.startswith(" " * 6), lines[1:])
    rest = [line.strip() for line in indented]
    return " ".join([lines[0], *rest])


def _show(capsys, monkeypatch, *args: str, columns: int = 72) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))  # shutil.get_terminal_size reads it first
    assert cli.main(["config", "show", *args]) == 0
    return capsys.readouterr().out


def _json(capsys, monkeypatch, *args: str) -> list[dict]:
    return json.loads(_show(capsys, monkeypatch, *args, "--format", "json"))


def test_json_round_trips_to_the_schema_rows(capsys, monkeypatch):
    shown = _json(capsys, monkeypatch)
    fields = {f.name for f in dataclasses.fields(SchemaRow)}
    rows = [SchemaRow(**{k: v for k, v in item.items() if k in fields}) for item in shown]
    assert rows == schema_rows(TrainConfig)
    by_key = {item["key"]: item for item in shown}
    assert by_key["env.batch_size"] | {"help": ""} == {
        "key": "env.batch_size",
        "type": "int >= 1",
        "default": 8,
        "required": False,
        "help": "",
        "section": "env",
        "strategies": [],
    }
    assert by_key["agents.N.name"]["required"] and by_key["steps"]["section"] == "top-level"
    assert by_key["algorithm_options.delta"]["strategies"] == readers("delta")
    assert "graft" in readers("delta") and "hacpo" not in readers("delta")
    assert by_key["algorithm_options.n"]["strategies"] == []


def test_each_option_belongs_to_the_strategy_that_declares_it():
    owners = option_strategies()
    assert set(owners) == {f.name for f in option_fields()}
    for name, options in (("graft", GraftOptions), ("hacpo", HacpoOptions), ("sgt", SgtOptions)):
        for spec in dataclasses.fields(options):
            assert owners[spec.name] == tuple(readers(spec.name)), spec.name
            assert name in owners[spec.name], spec.name
    for spec in dataclasses.fields(AlgorithmConfig):
        assert owners[spec.name] == (), spec.name


def test_text_groups_by_section_and_strategy_and_wraps_to_the_terminal(capsys, monkeypatch):
    text = _show(capsys, monkeypatch, columns=72)
    groups = [block.splitlines() for block in text.strip().split("\n\n")]
    titles = [_heading(lines) for lines in groups]
    assert len(titles) == len(set(titles))  # each section (and strategy) once
    for title in ("env", "top-level", "agents", "ray", "algorithm_options (every algorithm)"):
        assert title in titles
    for first in ("selection", "capability_window", "sgt_coef"):  # graft's, hacpo's, sgt's
        assert _title(first) in titles
    shown = {item["key"]: item for item in _json(capsys, monkeypatch)}
    listed = []
    for lines in groups:
        keys = [line.split()[0] for line in lines[1:] if not line.startswith(" " * 6)]
        assert {shown[key]["section"] for key in keys} == {lines[0].split()[0]}, lines[0]
        listed += keys
    assert sorted(listed) == sorted(shown)  # every key once
    assert max(len(line) for line in text.splitlines()) <= 72  # help and keys alike
    narrow = _show(capsys, monkeypatch, "--section", "agents", columns=50)
    assert max(len(line) for line in narrow.splitlines()) <= 50
    graft = groups[titles.index(_title("selection"))]
    first_key = next(line for line in graft[1:] if not line.startswith(" " * 6))
    assert first_key.split()[0] == "algorithm_options.selection"
    wide = _show(capsys, monkeypatch, columns=200)
    assert len(wide.splitlines()) < len(text.splitlines())  # the same help, fewer lines


def test_section_and_strategy_filters(capsys, monkeypatch):
    env = _json(capsys, monkeypatch, "--section", "env")
    assert [item["key"] for item in env] == [
        f"env.{f.name}" for f in dataclasses.fields(EnvSection)
    ]
    graft = _json(capsys, monkeypatch, "--strategy", "graft")
    assert [item["key"] for item in graft] == [
        f"algorithm_options.{f.name}" for f in dataclasses.fields(GraftOptions)
    ]
    assert _json(capsys, monkeypatch, "--strategy", "none") == []
    assert _json(capsys, monkeypatch, "--section", "env", "--strategy", "graft") == []
    assert _show(capsys, monkeypatch, "--strategy", "none") == "(no keys match)\n"
    top = [item["key"] for item in _json(capsys, monkeypatch, "--section", "top-level")]
    assert "steps" in top and not [key for key in top if "." in key]
    grid = _json(capsys, monkeypatch, "--grid", "--section", "eval")
    assert grid and all(item["key"].startswith("eval.") for item in grid)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--section", "evl"],
            "--section evl: unknown section; valid: agents, top-level, algorithm_options, ",
        ),
        (["--section", "evl"], "; did you mean 'eval' or 'env'?"),
        (["--strategy", "grfat"], "--strategy grfat: unknown strategy; valid: {strategies}"),
        (["--strategy", "grfat"], "; did you mean 'graft'"),
        (["--format", "jsn"], "--format jsn: unknown format; valid: text, lines, json; did you "),
    ],
)
def test_a_bad_filter_or_format_is_one_line_with_the_meant_name(capsys, args, message):
    assert cli.main(["config", "show", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    message = message.format(strategies=", ".join(available_strategies()))
    assert captured.err.startswith("graft config: error: --") and message in captured.err
