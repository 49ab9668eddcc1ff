"""The comparison grid file of `graft compare`: what to train, on which models, how to evaluate.

A grid is one YAML file (see configs/grids/compare_tiny.yaml for a commented example)::

    extends: compare_tiny.yaml        # optional: start from another grid file
    base: tiny_pair_graft.yaml        # run config path (relative to this file) or a mapping
    train: {steps: 16, env: {batch_size: 16}}   # deep-merged over the base run config
    algorithms:                       # registry name, display label, AlgorithmConfig overrides
      - {name: grpo, label: "GRPO n=8", options: {n: 8}}
      - {name: graft-stored, label: "GRAFT stored", stored_peer_from: "GRPO n=8"}
    pairs: [{models: [tiny-a, tiny-b]}]   # + per-model agent `options`, `own_skills`
    seeds: [0, 1, 2]
    baseline: "GRPO n=8"              # the label every other row is compared with
    eval: {sets: [procedural/addition, math500], procedural: {difficulty: 1}, limit: 32, k: 4}
    periodic_eval: {every: 4, limit: 8}   # learning curves and the best checkpoint

Parsing checks every field and names it in the error (`algorithms.1.options: ...`), so a
typo fails in a second rather than after an hour of training. Agent options of a model
come from the base config's agent with the same model, overridden by the pair's `options`,
so the study follows the base config's learning rate without repeating it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import algorithms
from algorithms.run_config import apply_override, parse_yaml
from graft_env.data import available as available_datasets
from graft_env.data.procedural import SKILLS

CHECKPOINTS = ("best", "final")


class GridError(ValueError):
    """A grid file is invalid; the message names the field."""


@dataclass(frozen=True)
class AlgorithmEntry:
    """One row group of the table: a registry entry with its overrides and display label."""

    name: str
    label: str
    options: Mapping[str, Any]
    stored_peer_from: str | None
    single_agent: bool  # no live exchange: one run per model (GRPO, graft-stored)


@dataclass(frozen=True)
class PairSpec:
    """Two models trained side by side (exchange) or each alone (single-agent algorithms)."""

    models: tuple[str, str]
    options: Mapping[str, Mapping[str, Any]]
    own_skills: Mapping[str, tuple[str, ...]]

    @property
    def agents(self) -> tuple[str, str]:
        return agent_name(self.models[0]), agent_name(self.models[1])

    @property
    def pair_id(self) -> str:
        return "+".join(self.agents)


@dataclass(frozen=True)
class EvalPlan:
    """The final evaluation (GRAFT-SPEC §10 protocol, smaller on CPU) of every updated model."""

    sets: tuple[str, ...]
    procedural: Mapping[str, Any]
    limit: int | None
    k: int
    temperature: float
    top_p: float
    max_new_tokens: int
    repeats: int
    seed: int
    batch_size: int
    checkpoint: str


@dataclass(frozen=True)
class PeriodicPlan:
    """Evaluation during training every `every` steps, on the first `limit` problems."""

    every: int
    limit: int | None
    k: int


@dataclass(frozen=True)
class GridSpec:
    """A validated grid. `base` is the merged run config every cell starts from; `threads`
    sets torch's CPU threads while the grid runs (None: as for `graft train`,
    $OMP_NUM_THREADS, else 1; a cell's own `threads` is not used)."""

    name: str
    base: Mapping[str, Any]
    algorithms: tuple[AlgorithmEntry, ...]
    pairs: tuple[PairSpec, ...]
    seeds: tuple[int, ...]
    baseline: str
    include_base: bool
    eval: EvalPlan
    periodic: PeriodicPlan | None
    threads: int | None


def agent_name(model: str) -> str:
    """The agent name of a model: its registry name, or the last part of its path."""
    name = Path(str(model).rstrip("/\\")).name or "model"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def slug(label: str) -> str:
    """A label as a directory name: "GRPO n=8" -> "grpo-n-8"."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "x"


def deep_merge(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `changes` merged in: mappings recursively, everything else replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _mapping(
    value: Any, where: str, allowed: Sequence[str] | None = None, required: Sequence[str] = ()
) -> Mapping[str, Any]:
    """`value` checked to be a mapping with only `allowed` keys (None: any) and `required` ones."""
    if not isinstance(value, Mapping):
        raise GridError(f"{where}: expected a mapping, got {type(value).__name__}")
    unknown = [] if allowed is None else sorted(set(value) - set(allowed))
    if unknown:
        raise GridError(f"{where}: unknown key(s) {unknown}; valid keys: {sorted(allowed)}")
    missing = [key for key in required if key not in value]
    if missing:
        raise GridError(f"{where}: missing required key(s) {missing}")
    return value


def _int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GridError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def _number(value: Any, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low < value <= high:
        raise GridError(f"{where}: expected a number in ({low}, {high}], got {value!r}")
    return float(value)


def _list(value: Any, where: str) -> list:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise GridError(f"{where}: expected a non-empty list, got {value!r}")
    return list(value)


def _base(value: Any, directory: Path) -> dict[str, Any]:
    """The base run config as plain data, from a path (relative to the grid file) or inline."""
    if isinstance(value, Mapping):
        return dict(value)
    if not isinstance(value, str):
        raise GridError(f"base: expected a run config path or mapping, got {value!r}")
    path = Path(value) if Path(value).is_absolute() else directory / value
    if not path.is_file():
        raise GridError(f"base: run config {path} does not exist")
    data = parse_yaml(path.read_text()) or {}
    if not isinstance(data, Mapping):
        raise GridError(f"base: {path} does not hold a mapping")
    return dict(data)


def _algorithms(value: Any, base_options: Mapping[str, Any]) -> tuple[AlgorithmEntry, ...]:
    entries = []
    for index, item in enumerate(_list(value, "algorithms")):
        where = f"algorithms.{index}"
        item = _mapping(item, where, ("name", "label", "options", "stored_peer_from"), ("name",))
        name, options = item["name"], item.get("options") or {}
        _mapping(options, f"{where}.options")
        try:
            config = algorithms.make(name, **{**base_options, **options}).config
        except (TypeError, ValueError) as error:
            raise GridError(f"{where}: {error}") from None
        if config.stored and not item.get("stored_peer_from"):
            raise GridError(f"{where}: {name!r} replays a stored peer; set stored_peer_from")
        if item.get("stored_peer_from") and not config.stored:
            raise GridError(f"{where}.stored_peer_from: {name!r} does not replay a stored peer")
        single = config.exchange == "none" or config.stored
        label = str(item.get("label") or name)
        entries.append(
            AlgorithmEntry(name, label, dict(options), item.get("stored_peer_from"), single)
        )
    labels = [entry.label for entry in entries]
    for index, entry in enumerate(entries):
        if entry.label in labels[:index]:
            raise GridError(f"algorithms.{index}.label: {entry.label!r} is used twice")
        source = entry.stored_peer_from
        if source is not None:
            sources = [e.label for e in entries if e.stored_peer_from is None]
            if source not in sources:
                raise GridError(
                    f"algorithms.{index}.stored_peer_from: {source!r} is not one of {sources}"
                )
    return tuple(entries)


def default_own_skills(model: str) -> tuple[str, ...] | None:
    """A tiny-pair member's own skills from the pair's build config; None for other models."""
    from graft_env.policies.tiny_config import TinyPairConfig

    specs = {spec.name: spec.skills for spec in TinyPairConfig().models}
    return specs.get(model)


def _pairs(value: Any) -> tuple[PairSpec, ...]:
    pairs = []
    for index, item in enumerate(_list(value, "pairs")):
        where = f"pairs.{index}"
        if not isinstance(item, Mapping):
            item = {"models": item}
        item = _mapping(item, where, ("models", "options", "own_skills"), ("models",))
        models = _list(item["models"], f"{where}.models")
        if len(models) != 2 or not all(isinstance(m, str) and m for m in models):
            raise GridError(f"{where}.models: expected two model names, got {models!r}")
        if agent_name(models[0]) == agent_name(models[1]):
            raise GridError(f"{where}.models: both models are named {agent_name(models[0])!r}")
        options = _mapping(item.get("options") or {}, f"{where}.options", models)
        skills = _mapping(item.get("own_skills") or {}, f"{where}.own_skills", models)
        own = {}
        for model in models:
            given = skills.get(model)
            chosen = default_own_skills(model) if given is None else tuple(given)
            unknown = sorted(set(chosen or ()) - set(SKILLS))
            if unknown:
                raise GridError(f"{where}.own_skills.{model}: unknown skills {unknown}")
            if chosen:
                own[agent_name(model)] = tuple(chosen)
        pairs.append(PairSpec((models[0], models[1]), dict(options), own))
    return tuple(pairs)


def _eval(value: Any) -> EvalPlan:
    keys = ("sets", "procedural", "limit", "k", "temperature", "top_p", "max_new_tokens")
    keys += ("repeats", "seed", "batch_size", "checkpoint")
    value = _mapping(value, "eval", keys, ("sets",))
    sets = _list(value["sets"], "eval.sets")
    known = available_datasets()
    for index, name in enumerate(sets):
        skill = name.split("/", 1)[1] if str(name).startswith("procedural/") else None
        if (skill is None and name not in known) or (skill is not None and skill not in SKILLS):
            raise GridError(
                f"eval.sets.{index}: unknown set {name!r}; use a dataset {known} or "
                f"procedural/<skill> with a skill in {list(SKILLS)}"
            )
    if len(set(sets)) != len(sets):
        raise GridError(f"eval.sets: a set is named twice in {sets}")
    limit = value.get("limit")
    checkpoint = value.get("checkpoint", "final")
    if checkpoint not in CHECKPOINTS:
        raise GridError(f"eval.checkpoint: expected one of {list(CHECKPOINTS)}, got {checkpoint!r}")
    return EvalPlan(
        sets=tuple(sets),
        procedural=dict(
            _mapping(value.get("procedural") or {}, "eval.procedural", ("difficulty", "seed"))
        ),
        limit=None if limit is None else _int(limit, "eval.limit", 1),
        k=_int(value.get("k", 8), "eval.k", 1),
        temperature=_number(value.get("temperature", 0.6), "eval.temperature", 0.0, 100.0),
        top_p=_number(value.get("top_p", 0.95), "eval.top_p", 0.0, 1.0),
        max_new_tokens=_int(value.get("max_new_tokens", 512), "eval.max_new_tokens", 1),
        repeats=_int(value.get("repeats", 1), "eval.repeats", 1),
        seed=_int(value.get("seed", 0), "eval.seed", 0),
        batch_size=_int(value.get("batch_size", 32), "eval.batch_size", 1),
        checkpoint=checkpoint,
    )


def _periodic(value: Any, plan: EvalPlan) -> PeriodicPlan | None:
    if value is None:
        return None
    value = _mapping(value, "periodic_eval", ("every", "limit", "k"), ("every",))
    every = _int(value["every"], "periodic_eval.every", 0)
    limit = value.get("limit", plan.limit)
    limit = None if limit is None else _int(limit, "periodic_eval.limit", 1)
    return (
        PeriodicPlan(every, limit, _int(value.get("k", plan.k), "periodic_eval.k", 1))
        if every
        else None
    )


def grid_from_dict(data: Any, directory: Path = Path("."), name: str = "grid") -> GridSpec:
    """Validate plain grid data; relative `base` paths resolve against `directory`."""
    keys = ("name", "base", "train", "algorithms", "pairs", "seeds", "baseline")
    keys += ("include_base", "eval", "periodic_eval", "threads")
    data = _mapping(data, "grid", keys, ("base", "algorithms", "pairs", "seeds", "eval"))
    base = deep_merge(_base(data["base"], directory), _mapping(data.get("train") or {}, "train"))
    base_options = _mapping(base.get("algorithm_options") or {}, "base.algorithm_options")
    entries = _algorithms(data["algorithms"], base_options)
    seeds = [_int(seed, f"seeds.{i}", 0) for i, seed in enumerate(_list(data["seeds"], "seeds"))]
    if len(set(seeds)) != len(seeds):
        raise GridError(f"seeds: a seed is listed twice in {seeds}")
    labels = [entry.label for entry in entries]
    baseline = data.get("baseline", labels[0])
    if baseline not in labels:
        raise GridError(f"baseline: {baseline!r} is not an algorithm label; labels: {labels}")
    include_base = data.get("include_base", True)
    if not isinstance(include_base, bool):
        raise GridError(f"include_base: expected true or false, got {include_base!r}")
    plan = _eval(data["eval"])
    periodic = _periodic(data.get("periodic_eval"), plan)
    if plan.checkpoint == "best" and periodic is None:
        raise GridError("eval.checkpoint: 'best' needs periodic_eval.every > 0 to pick a best")
    threads = data.get("threads")
    return GridSpec(
        name=str(data.get("name") or name),
        base=base,
        algorithms=entries,
        pairs=_pairs(data["pairs"]),
        seeds=tuple(seeds),
        baseline=baseline,
        include_base=include_base,
        eval=plan,
        periodic=periodic,
        threads=None if threads is None else _int(threads, "threads", 1),
    )


def _grid_data(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A grid file's data, merged over the grid it `extends` (lists are replaced whole).

    A relative `base` path is made absolute against the file that names it, so a grid can
    extend one in another folder.
    """
    if path.resolve() in seen:
        raise GridError(f"{path}: 'extends' loops back to itself")
    if not path.is_file():
        raise GridError(f"grid file {path} does not exist")
    data = parse_yaml(path.read_text()) or {}
    if not isinstance(data, dict):
        raise GridError(f"{path}: expected a mapping at the top level")
    if isinstance(data.get("base"), str):
        data["base"] = str((path.parent / data["base"]).resolve())
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise GridError(f"{path}: extends: expected a grid file path, got {parent!r}")
    return deep_merge(_grid_data(path.parent / parent, (*seen, path.resolve())), data)


def load_grid(path: str | Path, overrides: Sequence[str] = ()) -> GridSpec:
    """Read a grid YAML file (and the grid it `extends`), apply `key=value` overrides
    (as `--set`), validate."""
    path = Path(path)
    data = _grid_data(path)
    for assignment in overrides:
        apply_override(data, assignment)
    try:
        return grid_from_dict(data, path.parent, path.stem)
    except GridError as error:
        raise GridError(f"{path}: {error}") from None
