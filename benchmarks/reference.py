"""The generated reference text: the registry table and the configuration reference.

Both are built from the code they describe, so neither can drift from it: the registry table
from the shipped entries (those `algorithms.presets` registers: `shipped_entries`) and each
entry's preset (its exchange strategy and the options it sets away from `grpo`; each
strategy's class docstring), the configuration reference from
the run-config and grid-file schemas through `schema_lines`, the function `graft config
show` prints. README.md's registry block is rewritten by `python -m benchmarks.reference`
(and checked by tests/test_readme.py); the docs site's configuration page is filled in by
`docs/hooks.py` at build time (`mkdocs build --strict`).
"""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import algorithms
from algorithms.exchange import make_strategy
from algorithms.registry import registered_from
from algorithms.storage.yaml_schema import schema_lines

BEGIN, END = "<!-- registry: built by `python -m benchmarks.reference` -->", "<!-- /registry -->"
SHIPPED = "algorithms.presets"


def shipped_entries() -> list[str]:
    """The entries `algorithms.presets` registers, sorted: the table's rows. Entries that a
    strategy module, a `module:Name` reference or an installed plugin registers are listed by
    `algorithms.available()` and `graft config show`, not here, so adding one needs no
    README edit."""
    return [name for name in algorithms.available() if registered_from(name) == SHIPPED]


def registry_rows() -> list[tuple[str, str, str]]:
    """(entry, exchange strategy, options set away from `grpo`) per shipped entry."""
    base = algorithms.preset("grpo")
    rows = []
    for name in shipped_entries():
        config = algorithms.preset(name)
        changed = [
            f"`{field.name}={_value(getattr(config, field.name))}`"
            for field in sorted(dataclasses.fields(config), key=lambda f: f.name)
            if field.name != "exchange"
            and getattr(config, field.name) != getattr(base, field.name, field.default)
        ]
        rows.append((name, config.exchange, ", ".join(changed)))
    return rows


def strategy_rows() -> list[tuple[str, str]]:
    """(strategy, the first line of its class docstring) per strategy a shipped entry uses."""
    rows = {}
    for name in shipped_entries():
        strategy = make_strategy(algorithms.configure(name))
        summary = (type(strategy).__doc__ or "").strip().split("\n", 1)[0]
        rows.setdefault(algorithms.preset(name).exchange, summary)
    return sorted(rows.items())


def _value(value: object) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def registry_table() -> str:
    """The registry as markdown (README's registry block): a table of the entries, then one of
    the exchange strategies they use."""
    lines = ["| entry | exchange | options set away from `grpo` |", "|---|---|---|"]
    lines += [
        _row(f"`{name}`", f"`{exchange}`", changed or "–")
        for name, exchange, changed in registry_rows()
    ]
    lines += ["", "| exchange | what moves between the models |", "|---|---|"]
    lines += [_row(f"`{name}`", summary or "–") for name, summary in strategy_rows()]
    return "\n".join(lines)


def _row(*cells: str) -> str:
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell (GitHub and Python-Markdown alike)."""
    text = " ".join(text.split()).replace("|", "\\|")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def schema_sections(lines: Iterable[str]) -> dict[str, list[list[str]]]:
    """`schema_lines` output grouped by section: a key with sub-keys (`env.batch_size`) goes
    under its first part (`env`), a top-level key without any under "run"; each row is
    [key, type, default, help]."""
    rows = [[*line.split("  ", 3), "", "", ""][:4] for line in lines]
    nested = {row[0].split(".", 1)[0] for row in rows if "." in row[0]}
    sections: dict[str, list[list[str]]] = {}
    for row in rows:
        top = row[0].split(".", 1)[0]
        sections.setdefault(top if top in nested else "run", []).append(row)
    return sections


def schema_page(title: str, lines: Sequence[str]) -> str:
    """One schema as markdown: a table per section, every key with its type, default, help."""
    out = [f"## {title}", ""]
    for section, rows in schema_sections(lines).items():
        out += [f"### `{section}`", "", "| key | type | default | help |", "|---|---|---|---|"]
        for key, kind, default, help_text in rows:
            cells = _row(kind, default.removeprefix("default "), help_text)
            out.append(f"| {key_cell(key)} {cells}")
        out.append("")
    return "\n".join(out)


def key_cell(key: str) -> str:
    """A config key as the reference's table shows it: code that a narrow column may break
    only after a dot (`<wbr>`; the site's CSS turns off code's break-anywhere for the
    `config-key` class), never inside a name."""
    parts = [html.escape(part) for part in key.split(".")]
    return f'<code class="config-key">{".<wbr>".join(parts)}</code>'


def config_reference() -> str:
    """The configuration reference: the run-config schema, then the grid-file schema."""
    from algorithms.training.run_config import TrainConfig
    from benchmarks.compare.grid import GridFile

    return "\n".join(
        [
            schema_page("Run config (`graft train --config FILE`)", schema_lines(TrainConfig)),
            schema_page("Grid file (`graft compare --config GRID`)", schema_lines(GridFile)),
        ]
    )


def registry_block(readme: str) -> str:
    """The text between README.md's registry markers."""
    return readme[readme.index(BEGIN) + len(BEGIN) : readme.index(END)].strip("\n")


def write_readme_registry(readme: Path) -> None:
    """Rewrite the registry block of `readme` from the registry."""
    text = readme.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN)
    tail = rest.split(END)[1]
    readme.write_text(f"{head}{BEGIN}\n{registry_table()}\n{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    write_readme_registry(Path(__file__).resolve().parents[1] / "README.md")
