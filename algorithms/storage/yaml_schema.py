"""Typed YAML config files: reading them, the field types, one-line errors, the schema text.

A config file's schema is a set of frozen dataclasses (the run config's `TrainConfig`, the
grid file's `GridFile`): each field's type, with its range (`Positive`, `Share`, ...), and
its help text are written once, on the field. pydantic checks data against them
(`validate_as`), so every error is one line naming the full key (`env.batch_size: 'abc' is
not an integer`, `eval.procedural.level: unknown key; valid: difficulty, seed`), and
`schema_rows` lists them (`graft config show [--grid]`). YAML syntax errors name
file:line:column (`parse_yaml`, `read_yaml_mapping`); `--set key=value` overrides address
nested fields with dots (`apply_override`). Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import TypeAdapter, ValidationError

# The field types and errors are defined once, in graft_env.schema; re-exported here.
from graft_env.schema import ConfigError as ConfigError
from graft_env.schema import Count as Count
from graft_env.schema import Flag as Flag
from graft_env.schema import PathText as PathText
from graft_env.schema import Positive as Positive
from graft_env.schema import PositiveFloat as PositiveFloat
from graft_env.schema import Share as Share
from graft_env.schema import Text as Text
from graft_env.schema import describe_error as describe_error


class _Loader(yaml.SafeLoader):
    """YAML loader that reads `1e-6` as a float (YAML 1.2), as every user expects.

    PyYAML follows YAML 1.1, where a float needs a dot (`1.0e-6`); the paper's
    learning rate written `1e-6` would otherwise arrive as a string.
    """


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def parse_yaml(text: str, where: str = "") -> Any:
    """Parse YAML text with `_Loader`; a syntax error is a one-line `ConfigError` naming
    `where` (a file name, or `--set key`), the line and column, and what was found."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        at = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark and "\n" in text else where
        problem = " ".join(str(part) for part in (error.context, error.problem) if part)
        if "'\\t'" in problem:  # PyYAML names the character by its repr
            problem += " (YAML indents with spaces, not tabs)"
        raise ConfigError(f"{at or 'yaml'}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{where or 'yaml'}: YAML error: {error}") from None


T = TypeVar("T")


@functools.cache
def adapter(cls: type) -> TypeAdapter:
    """The validator of schema dataclass `cls`, built on first use (a few ms)."""
    return TypeAdapter(cls)


def validate_as(
    cls: type[T], data: Any, error: type[ValueError] = ConfigError, where: str = ""
) -> T:
    """`data` (found at key `where`) as schema dataclass `cls`, every type and range checked;
    raises `error` with one `key.path: what is wrong` part per mistake, on one line."""
    try:
        return adapter(cls).validate_python(data)
    except ValidationError as invalid:
        prefix = tuple(where.split(".")) if where else ()
        parts = [
            describe_error({**e, "loc": (*prefix, *e["loc"])}, _valid_keys(cls, e["loc"]))
            for e in invalid.errors()
            if not _after_item_errors(e)
        ]
        raise error("; ".join(parts)) from None


def _after_item_errors(error: Mapping[str, Any]) -> bool:
    """pydantic's "too short after validation" for a list whose items failed: those items'
    own errors say what is wrong."""
    value, ctx = error.get("input"), error.get("ctx") or {}
    given = len(value) if isinstance(value, list | tuple) else None
    return error["type"] == "too_short" and given is not None and given >= ctx["min_length"]


def _valid_keys(cls: type, loc: Sequence[Any]) -> list[str]:
    """The field names of the dataclass that holds the key at `loc` (for unknown-key errors)."""
    node: Any = cls
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        hints = typing.get_type_hints(node)
        node = _dataclass_in(hints.get(part))
        if node is None:
            return []
    return sorted(f.name for f in dataclasses.fields(node))


def _dataclass_in(hint: Any) -> type | None:
    """The dataclass inside a field type (`X`, `X | None`, `tuple[X, ...]`), or None."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) is Annotated:
        return _dataclass_in(typing.get_args(hint)[0])
    for arg in typing.get_args(hint):
        found = _dataclass_in(arg)
        if found is not None:
            return found
    return None


@dataclasses.dataclass(frozen=True)
class SchemaRow:
    """One key of a schema as `graft config show` prints it: its dotted key, type as a user
    reads it (`int >= 1`), default (plain, JSON-ready; None when required) and help."""

    key: str
    type: str
    default: Any
    required: bool
    help: str

    @property
    def default_text(self) -> str:
        return "required" if self.required else f"default {json.dumps(self.default)}"

    def line(self) -> str:
        """`key  type  default  help`, the one-line form."""
        return f"{self.key}  {self.type}  {self.default_text}  {self.help}".rstrip()


def schema_rows(cls: type, prefix: str = "") -> list[SchemaRow]:
    """The schema of dataclass `cls`, one row per field (nested fields dotted,
    `agents.N.<field>` for list items): what `graft config show` prints. A mapping field
    whose `metadata["options"]` names option classes (a function returning
    `(key_prefix, dataclass)` pairs: `algorithm_options`, `agents.N.options`, `ray`) lists
    their fields under it (`agents.N.options.vllm_max_num_seqs`)."""
    rows = []
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        nested = _dataclass_in(hint)
        if nested is not None and typing.get_origin(_unannotated(hint)) is tuple:
            rows += schema_rows(nested, f"{prefix}{f.name}.N.")
            continue
        if nested is not None and f.default is dataclasses.MISSING:
            rows += schema_rows(nested, f"{prefix}{f.name}.")
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = None if required else plain(_default(f))
        help_text = f.metadata.get("help", "")
        rows.append(SchemaRow(f"{prefix}{f.name}", _type_name(hint), default, required, help_text))
        if nested is not None:  # an optional section: its fields too
            rows += schema_rows(nested, f"{prefix}{f.name}.")
        for key_prefix, options in f.metadata.get("options", lambda: ())():
            rows += schema_rows(options, f"{prefix}{f.name}.{key_prefix}")
    return rows


def _default(f: dataclasses.Field) -> Any:
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def schema_lines(cls: type, prefix: str = "") -> list[str]:
    """`schema_rows` as `key  type  default  help` lines."""
    return [row.line() for row in schema_rows(cls, prefix)]


def _unannotated(hint: Any) -> Any:
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint


def _type_name(hint: Any) -> str:
    """A field type as a user reads it: `int >= 1`, `float in (0, 1]`, `str | null`, ..."""
    if typing.get_origin(hint) is Annotated:
        base, *extras = typing.get_args(hint)
        bounds = []
        for extra in extras:
            for constraint in getattr(extra, "metadata", ()):
                for name, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
                    if hasattr(constraint, name):
                        bounds.append(f"{op} {getattr(constraint, name)}")
        return " ".join([_type_name(base), ", ".join(bounds)]).strip()
    if typing.get_origin(hint) is Literal:
        return " | ".join("null" if arg is None else repr(arg) for arg in typing.get_args(hint))
    args = typing.get_args(hint)
    if type(None) in args:
        return " | ".join(_type_name(a) for a in args if a is not type(None)) + " | null"
    if dataclasses.is_dataclass(hint):
        return "mapping"
    if typing.get_origin(hint) in (Mapping, dict):
        return "mapping"
    if typing.get_origin(hint) in (tuple, Sequence, list):
        items = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return f"list of {_type_name(items[0])}" if len(set(items)) == 1 else "list"
    return getattr(hint, "__name__", str(hint))


def plain(value: Any) -> Any:
    """Mappings and tuples as plain dicts and lists, for YAML/JSON."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `dotted.key=value` override in place; the value is parsed as YAML."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"--set {key}: {'.'.join(parts[: i + 1])} is not a list index")
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
    last = parts[-1]
    value = parse_yaml(raw, f"--set {key}")
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise ConfigError(f"--set {key}: {last!r} is not a valid list index")
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(f"--set {key}: {'.'.join(parts[:-1])} is not a mapping")


def read_yaml_mapping(path: str | os.PathLike, what: str = "config file") -> dict[str, Any]:
    """The mapping at the top of a YAML file; a missing file, a directory, a syntax error
    or another top-level value is a one-line `ConfigError` naming the file."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} {path} is a directory, not a YAML file")
    if not path.is_file():
        raise ConfigError(f"{what} {path} does not exist")
    data = parse_yaml(path.read_text(), str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got a {_yaml_kind(data)}")
    return data


def _yaml_kind(value: Any) -> str:
    return "list" if isinstance(value, list) else type(value).__name__
