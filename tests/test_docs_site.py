"""The docs site's generated blocks (docs/hooks.py, benchmarks.reference): markers are filled
from the code, an unknown marker stops the build, and the configuration reference lists every
key `graft config show` lists, each once, under its section."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from algorithms.storage.yaml_schema import schema_lines
from algorithms.training.run_config import TrainConfig
from benchmarks.reference import config_reference, key_cell, registry_table, schema_sections

REPO = Path(__file__).resolve().parents[1]


def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_marker_is_replaced_by_its_generator_and_an_unknown_one_stops_the_build():
    fill = hooks().fill
    assert fill("a\n<!-- generated: registry -->\nb", "x.md") == f"a\n{registry_table()}\nb"
    assert fill("no markers", "x.md") == "no markers"
    with pytest.raises(ValueError, match=r"^x\.md: unknown generated block 'nope'"):
        fill("<!-- generated: nope -->", "x.md")


def test_every_page_marker_names_a_generator():
    module = hooks()
    for page in (REPO / "docs").rglob("*.md"):
        for name in module.MARKER.findall(page.read_text(encoding="utf-8")):
            assert name in module.GENERATORS, f"{page}: {name}"


def test_the_configuration_reference_lists_every_key_once():
    keys = [line.split("  ", 1)[0] for line in schema_lines(TrainConfig)]
    page = config_reference().split("## Grid file", 1)[0]  # the run-config part
    assert len(keys) > 100
    for key in keys:
        assert page.count(f"| {key_cell(key)} |") == 1, key


keys = st.lists(
    st.lists(
        st.sampled_from(["env", "agents", "N", "seed", "lr", "ray"]), min_size=1, max_size=3
    ).map(".".join),
    max_size=20,
)


@given(keys)
def test_schema_sections_keep_every_row_once_under_its_first_part(names):
    lines = [f"{name}  int  default 1  help of {name}" for name in names]
    sections = schema_sections(lines)
    rows = [row for section in sections.values() for row in section]
    assert sorted(row[0] for row in rows) == sorted(names)
    nested = {name.split(".")[0] for name in names if "." in name}
    for section, section_rows in sections.items():
        for key, kind, default, help_text in section_rows:
            top = key.split(".")[0]
            assert section == (top if top in nested else "run")
            assert (kind, default, help_text) == ("int", "default 1", f"help of {key}")


def test_a_config_key_breaks_only_after_a_dot():
    """The reference's key column: code whose only break opportunities are the `<wbr>` after
    each dot, and the site's CSS turns off code's break-anywhere for that class."""
    assert key_cell("agents.N.options.max_tokens") == (
        '<code class="config-key">agents.<wbr>N.<wbr>options.<wbr>max_tokens</code>'
    )
    css = (REPO / "docs" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert "code.config-key" in css and "word-break: normal" in css
