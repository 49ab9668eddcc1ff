"""`graft config show`: the config schema by section and strategy, wrapped to the terminal.

Every key of the run config (or, with `--grid`, the grid file) comes from
`algorithms.storage.yaml_schema.schema_rows`; this module only groups, filters and prints
them. A key's section is its first part (`env`, `agents`, `algorithm_options`; the keys that
hold no others, `steps`, `seed`, ..., are `top-level`); an algorithm option also names the
exchange strategies that declare it (`option_strategies`: none for the options every
algorithm reads). Formats: `text` (grouped, help wrapped to the terminal width), `lines`
(one aligned line per key, for grep: what `graft train --help` lists) and `json` (a list of
objects, for tools). Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import textwrap
from collections.abc import Sequence
from typing import Any

from algorithms.storage.yaml_schema import SchemaRow, schema_rows
from graft_env.schema import ConfigError, unknown_name

FORMATS = ("text", "lines", "json")
TOP_LEVEL = "top-level"
ALGORITHM_SECTION = "algorithm_options"
HELP_INDENT = " " * 6


@dataclasses.dataclass(frozen=True)
class ShownKey:
    """One schema row with where it belongs: its section and, for an algorithm option, the
    strategies that declare it (empty: every algorithm reads it)."""

    row: SchemaRow
    section: str
    strategies: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self.row),
            "section": self.section,
            "strategies": list(self.strategies),
        }


def option_strategies() -> dict[str, tuple[str, ...]]:
    """Algorithm option name -> the registered exchange strategies that read it (() for
    `AlgorithmConfig`'s own options). The one place that decides which strategy an option
    belongs to: each strategy class's `option_names()`, its own options and those of every
    strategy it subclasses (a GRAFT variant is listed with GRAFT's options)."""
    import algorithms.presets  # noqa: F401  (registers the built-in and plugin strategies)
    from algorithms.config import AlgorithmConfig, option_fields
    from algorithms.exchange import available_strategies, make_strategy

    owners: dict[str, tuple[str, ...]] = {spec.name: () for spec in option_fields()}
    for name in available_strategies():
        for option in sorted(type(make_strategy(AlgorithmConfig(exchange=name))).option_names()):
            owners[option] += (name,)
    return owners


def shown_keys(grid: bool = False) -> list[ShownKey]:
    """Every key of the run-config schema (`grid`: the grid file's), in schema order."""
    if grid:
        from benchmarks.compare.grid import GridFile as schema
    else:
        from algorithms.training.run_config import TrainConfig as schema
    owners = option_strategies()
    rows = schema_rows(schema)
    sections = {row.key.partition(".")[0] for row in rows if "." in row.key}
    shown = []
    for row in rows:
        section, _, rest = row.key.partition(".")
        strategies = owners.get(rest, ()) if section == ALGORITHM_SECTION else ()
        shown.append(ShownKey(row, section if section in sections else TOP_LEVEL, strategies))
    return shown


def filtered(
    shown: Sequence[ShownKey], section: str | None = None, strategy: str | None = None
) -> list[ShownKey]:
    """The keys of `section` (a key's first part, or 'top-level') and of `strategy` (the
    options it declares); an unknown name is a one-line ConfigError with the valid ones."""
    if section is not None:
        sections = list(dict.fromkeys(key.section for key in shown))
        if section not in sections:
            raise ConfigError(f"--section {section}: {unknown_name('section', section, sections)}")
        shown = [key for key in shown if key.section == section]
    if strategy is not None:
        from algorithms.exchange import available_strategies

        strategies = available_strategies()
        if strategy not in strategies:
            problem = unknown_name("strategy", strategy, strategies)
            raise ConfigError(f"--strategy {strategy}: {problem}")
        shown = [key for key in shown if strategy in key.strategies]
    return list(shown)


def render(shown: Sequence[ShownKey], fmt: str = "text", width: int | None = None) -> str:
    """`shown` as `fmt`: 'text' (grouped, wrapped to `width`, default the terminal's),
    'lines' or 'json'."""
    if fmt == "json":
        return json.dumps([key.as_dict() for key in shown], indent=2)
    if fmt == "lines":
        return "\n".join(aligned_lines([key.row for key in shown]))
    if fmt != "text":
        raise ConfigError(f"--format {fmt}: {unknown_name('format', fmt, FORMATS)}")
    if not shown:
        return "(no keys match)"
    width = width or shutil.get_terminal_size().columns
    return "\n\n".join(_group_text(group, width) for group in _groups(shown))


def aligned_lines(rows: Sequence[SchemaRow]) -> list[str]:
    """One `key  type  default  help` line per row, the first three in aligned columns."""
    cells = [(row.key, row.type, row.default_text, row.help) for row in rows]
    widths = [max((len(cell[i]) for cell in cells), default=0) for i in range(3)]
    return [
        "  ".join(text.ljust(w) for text, w in zip(cell, [*widths, 0], strict=True)).rstrip()
        for cell in cells
    ]


def _groups(shown: Sequence[ShownKey]) -> list[list[ShownKey]]:
    """The keys by (section, strategies), groups in order of first appearance."""
    groups: dict[tuple[str, tuple[str, ...]], list[ShownKey]] = {}
    for key in shown:
        groups.setdefault((key.section, key.strategies), []).append(key)
    return list(groups.values())


def _group_text(group: Sequence[ShownKey], width: int) -> str:
    """A group's title, then per key `key  type  default` (aligned in columns where that
    fits the width) and its help wrapped below it."""
    first = group[0]
    title = first.section
    if first.section == ALGORITHM_SECTION:
        owners = ", ".join(repr(name) for name in first.strategies)
        title += f" (strategy {owners})" if owners else " (every algorithm)"
    cells = [(key.row.key, key.row.type, key.row.default_text) for key in group]
    widths = [max(len(cell[i]) for cell in cells) for i in range(2)]
    wrap = max(width, len(HELP_INDENT) + 20)  # a few words a line on any terminal
    # a long title (a strategy option read by many GRAFT variants) goes on indented lines
    lines = textwrap.wrap(title, wrap, subsequent_indent=HELP_INDENT, break_long_words=False)
    for key, (name, kind, default) in zip(group, cells, strict=True):
        forms = (  # the first that fits: both columns aligned, the key's, neither
            f"  {name.ljust(widths[0])}  {kind.ljust(widths[1])}  {default}",
            f"  {name.ljust(widths[0])}  {kind}  {default}",
            f"  {name}  {kind}  {default}",
        )
        fitting = [form for form in forms if len(form) <= wrap]
        # else the type and default go on a line of their own
        lines += fitting[:1] or [f"  {name}", *_wrapped(f"{kind}  {default}", wrap)]
        lines += _wrapped(key.row.help, wrap)
    return "\n".join(lines)


def _wrapped(text: str, width: int) -> list[str]:
    """Help text indented under its key, in lines of at most `width` characters where its
    words allow."""
    return textwrap.wrap(
        text,
        width,
        initial_indent=HELP_INDENT,
        subsequent_indent=HELP_INDENT,
        break_long_words=False,  # a long key or path stays whole
        break_on_hyphens=False,  # and `log-probs` too
    )
