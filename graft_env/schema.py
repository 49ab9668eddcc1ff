"""Typed options: the constrained field types, their checks and the one-line error form.

Every option a user can write (a run config's sections, `AlgorithmConfig`, the policy and
engine options, Ray's) is a field of a frozen dataclass whose type carries its range
(`Positive`, `Fraction`, a `Literal` of choices, ...) and whose `metadata["help"]` says what
it does. `check_options` checks values against those types (pydantic, strict: no "8" for 8,
no 8.5 or true for an int; an int is a valid float and is kept as given), and every mistake
is one line, `<where>.<key>: <what is wrong>` (`describe_error`), `where` being the class
(`HFPolicyOptions.lr: ...`) or, from a config file, the full key path
(`agents.1.options.lr: ...`, `OptionError.at`); an unknown name lists the valid ones and the
closest, `did you mean` (`unknown_name`). No torch here, and nothing from `algorithms`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, Strict, ValidationError, create_model

from graft_env.suggest import did_you_mean


class ConfigError(ValueError):
    """A configuration (a run config, a YAML file, an override) is invalid; the message names
    the field."""


class OptionError(ConfigError):
    """One bad option, `<where>.<key>: <problem>`; `at` says the same under a config key."""

    def __init__(self, where: str, key: str, problem: str) -> None:
        super().__init__(f"{where}.{key}: {problem}")
        self.key, self.problem = key, problem

    def at(self, where: str, prefix: str = "") -> ConfigError:
        """The same error found at config key `where` (`agents.0.options`), its key written
        with `prefix` (`vllm_`)."""
        return ConfigError(f"{where}.{prefix}{self.key}: {self.problem}")


def unknown_name(what: str, name: str, valid: Sequence[str]) -> str:
    """The problem part of an unknown-name error: `unknown option; valid: a, b; did you mean
    'a'?` (the suggestion only when a valid name is close, `graft_env.suggest`)."""
    return f"unknown {what}; valid: {', '.join(valid)}{did_you_mean(name, valid)}"


def require(where: str, key: str, value: object, requirement: str) -> OptionError:
    """The error of an option `value` that breaks a rule its type cannot state:
    `<where>.<key>: <value> must be <requirement>`."""
    return OptionError(where, key, f"{value!r} must be {requirement}")


def _fspath(value: Any) -> Any:
    """A path given as a `Path` from Python, as the string YAML would give."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


# The field types: pydantic checks them, `algorithms.storage.yaml_schema.schema_lines` prints them.
Count = Annotated[int, Strict(), Field(ge=0)]
Positive = Annotated[int, Strict(), Field(ge=1)]
PositiveFloat = Annotated[float, Strict(), Field(gt=0)]
Share = Annotated[float, Strict(), Field(gt=0, le=1)]
Flag = Annotated[bool, Strict()]
Text = Annotated[str, Strict()]
PathText = Annotated[str, BeforeValidator(_fspath), Strict()]
# Finite numbers (no nan or inf), for options that enter the loss or a comparison.
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]
NonNegative = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]
PositiveNumber = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
Fraction = Annotated[float, Strict(), Field(ge=0, lt=1, allow_inf_nan=False)]


@functools.cache
def _fields_model(cls: type) -> type:
    """A pydantic model of dataclass `cls`'s fields (no unknown names), to check values
    without building `cls` (whose `__post_init__` may be what calls the check)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: (hints[f.name], None) for f in dataclasses.fields(cls)}
    return create_model(cls.__name__, __config__=ConfigDict(extra="forbid"), **fields)


def check_options(cls: type, values: Mapping[str, Any], where: str) -> None:
    """`values` (some or all fields of dataclass `cls`) checked against the field types;
    the first mistake raises `OptionError` at `where` (an unknown name lists the valid ones,
    in declaration order)."""
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [key for key in values if key not in names]
    if unknown:
        key = str(unknown[0])
        raise OptionError(where, key, unknown_name("option", key, names))
    try:
        _fields_model(cls).model_validate(dict(values))
    except ValidationError as invalid:
        first = invalid.errors()[0]
        key, *rest = first["loc"]
        message = describe_error({**first, "loc": (where, key, *rest)})
        key_path = ".".join(map(str, (key, *rest)))
        raise OptionError(where, key_path, message.split(": ", 1)[1]) from None


def check_fields(instance: Any, where: str) -> None:
    """Every field of dataclass `instance` checked against its type (`check_options`)."""
    values = {f.name: getattr(instance, f.name) for f in dataclasses.fields(instance)}
    check_options(type(instance), values, where)


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
}


def describe_error(error: Mapping[str, Any], valid_keys: Sequence[str] = ()) -> str:
    """One pydantic error as `key.path: what is wrong` (`env.batch_size: 'abc' is not an
    integer`, `seed: -1 must be >= 0`, `env.batchsize: unknown key; valid: ...`)."""
    where = ".".join(str(part) for part in error["loc"]) or "config"
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    base = kind.split("_")[0]
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        return f"{where}: {unknown_name('key', str(error['loc'][-1]), valid_keys)}"
    if kind in ("missing", "missing_argument", "missing_keyword_argument"):
        return f"{where}: missing (required)"
    if base in _TYPE_WORDS and kind.endswith(("_type", "_parsing", "_from_float")):
        return f"{where}: {value!r} is not {_TYPE_WORDS[base]}"
    if kind == "finite_number":
        return f"{where}: {value!r} is not a finite number"
    bounds = {"greater": ">", "less": "<"}
    if base in bounds:
        op = bounds[base] + ("=" if kind.endswith("_equal") else "")
        limit = next(iter(ctx.values()))
        return f"{where}: {value!r} must be {op} {limit:g}"
    if kind == "literal_error":
        expected = ctx["expected"]
        meant = (
            did_you_mean(value, re.findall(r"'([^']*)'", expected))
            if isinstance(value, str)
            else ""
        )
        return f"{where}: {value!r} is not one of {expected.replace(' or ', ', ')}{meant}"
    if kind in ("dataclass_type", "dict_type", "mapping_type", "model_type"):
        return f"{where}: expected a mapping, got {type(value).__name__}"
    if kind in ("too_short", "too_long"):
        size = len(value) if isinstance(value, list | tuple) else "?"
        wanted = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        word = "at least" if kind == "too_short" else "at most"
        return f"{where}: expected {word} {wanted} item(s), got {size}: {value!r}"
    if kind in ("tuple_type", "list_type"):
        return f"{where}: expected a list, got {type(value).__name__}"
    if kind == "value_error":
        return f"{where}: {ctx['error']}"
    return f"{where}: {error['msg']} (got {value!r})"
