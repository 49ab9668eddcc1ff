"""The comparison grid file of `graft compare`: what to train, on which models, how to evaluate.

A grid is one YAML file (see configs/grids/compare_tiny.yaml for a commented example)::

    extends: compare_tiny.yaml        # optional: start from another grid file
    base: tiny_pair_graft.yaml        # run config path (relative to this file) or a mapping
    train: {steps: 16, env: {batch_size: 16}}   # deep-merged over the base run config
    algorithms:                       # registry name, display label, AlgorithmConfig overrides
      - {name: grpo, label: "GRPO n=8", options: {n: 8}}
      - {name: graft-stored, label: "GRAFT stored", stored_peer_from: "GRPO n=8"}
      - {name: graft-library, label: "GRAFT library", library_from: "GRPO n=8", library_runs: 2}
    pairs: [{models: [tiny-a, tiny-b]}]   # + per-model agent `options`, `own_skills`, `build`
    seeds: [0, 1, 2]
    baseline: "GRPO n=8"              # the label every other row is compared with
    eval: {sets: [procedural/addition, math500], procedural: {difficulty: 1}, limit: 32, k: 4}
    periodic_eval: {every: 4, limit: 8}   # learning curves and the best checkpoint

The file's schema is `GridFile` (`grid_schema`: its types, ranges and help on the fields,
checked by pydantic as run configs are, printed by `graft config show --grid`): every error
is one line naming the full key (`eval.k: 0 must be >= 1`, `algorithms.1: unknown
option(s) ...`), so a typo fails in a second rather than after an hour of training. Agent
options of a model come from the base config's agent with the same model, overridden by the
pair's `options`, so the study follows the base config's learning rate without repeating it.

A pair of built-in members can name a committed build, `build: {path: <dir relative to the
file>, weights_sha256: {<member>: <hex>, ...}}`: its members load from that directory (it
sets their `tiny_seed` and `cache_dir`), never from a build of this machine, and the grid
refuses in one line naming the path and both digests where the weights there differ.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import algorithms
from algorithms.exchange import make_strategy
from algorithms.storage.yaml_schema import (
    ConfigError,
    apply_override,
    read_yaml_mapping,
    validate_as,
)
from algorithms.training.eval_settings import ProceduralOptions
from algorithms.training.run_config import check_policy_options
from benchmarks.compare.grid_schema import (
    AlgorithmEntry,
    AlgorithmItem,
    EvalPlan,
    GridFile,
    GridSpec,
    PairBuildItem,
    PairItem,
    PairSpec,
    PeriodicPlan,
    agent_name,
    slug,
)
from graft_env.data import available as available_datasets
from graft_env.data.procedural import SKILLS
from graft_env.policies.tiny.build_files import BuildFiles, check_build
from graft_env.schema import OptionError

__all__ = [  # the grid's names, wherever defined (`grid_schema`: the file's types)
    "BUILD_OPTIONS",
    "DEFAULT_LIBRARY_RUNS",
    "AlgorithmEntry",
    "AlgorithmItem",
    "EvalPlan",
    "GridError",
    "GridFile",
    "GridSpec",
    "PairBuildItem",
    "PairItem",
    "PairSpec",
    "PeriodicPlan",
    "agent_name",
    "deep_merge",
    "default_own_skills",
    "grid_from_dict",
    "load_grid",
    "slug",
]


class GridError(ValueError):
    """A grid file is invalid; the message names the field."""


def deep_merge(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `changes` merged in: mappings recursively, everything else replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _base(value: Any, directory: Path) -> dict[str, Any]:
    """The base run config as plain data, from a path (relative to the grid file) or inline."""
    if isinstance(value, Mapping):
        return dict(value)
    if not isinstance(value, str):
        raise GridError(f"base: expected a run config path or mapping, got {value!r}")
    path = Path(value) if Path(value).is_absolute() else directory / value
    try:
        return read_yaml_mapping(path, "run config")
    except ConfigError as error:
        raise GridError(f"base: {error}") from None


DEFAULT_LIBRARY_RUNS = 2
BUILD_OPTIONS = ("tiny_seed", "cache_dir")  # agent options a pair's committed build sets


def _source_check(item: AlgorithmItem, stored: bool, where: str) -> None:
    """A stored-peer algorithm reads exactly one source (a replayed run or a library);
    any other reads none."""
    if stored and not (item.stored_peer_from or item.library_from):
        raise GridError(
            f"{where}: {item.name!r} replays a stored peer; set stored_peer_from or library_from"
        )
    if item.stored_peer_from and item.library_from:
        raise GridError(f"{where}: set stored_peer_from or library_from, not both")
    given = "stored_peer_from" if item.stored_peer_from else "library_from"
    if not stored and (item.stored_peer_from or item.library_from):
        raise GridError(f"{where}.{given}: {item.name!r} does not replay a stored peer")
    if item.library_runs is not None and not item.library_from:
        raise GridError(f"{where}.library_runs: set only with library_from")


def _entry(
    item: AlgorithmItem, base_options: Mapping[str, Any], seeds: int, where: str
) -> tuple[AlgorithmEntry, int]:
    """One `algorithms:` item checked and resolved, with its group size n."""
    try:
        config = algorithms.configure(item.name, **{**base_options, **item.options})
    except OptionError as error:  # a bad value: the uniform `<key path>: <problem>`
        raise GridError(str(error.at(f"{where}.options"))) from None
    except (TypeError, ValueError) as error:
        raise GridError(f"{where}: {error}") from None
    _source_check(item, config.stored, where)
    runs = (item.library_runs or DEFAULT_LIBRARY_RUNS) if item.library_from else 0
    if runs >= seeds:
        raise GridError(
            f"{where}.library_runs: {runs} runs at other seeds than the "
            f"cell's own need at least {runs + 1} seeds; the grid has {seeds}"
        )
    entry = AlgorithmEntry(
        name=item.name,
        label=item.label or item.name,
        options=dict(item.options),
        stored_peer_from=item.stored_peer_from,
        single_agent=not make_strategy(config).moves_groups or config.stored,
        library_from=item.library_from,
        library_runs=runs,
    )
    return entry, config.n


def _algorithms(
    items: Sequence[AlgorithmItem], base_options: Mapping[str, Any], seeds: int
) -> tuple[AlgorithmEntry, ...]:
    resolved = [
        _entry(item, base_options, seeds, f"algorithms.{index}") for index, item in enumerate(items)
    ]
    entries = [entry for entry, _ in resolved]
    sizes = {}  # label -> group size n
    for index, (entry, n) in enumerate(resolved):
        if entry.label in sizes:
            raise GridError(f"algorithms.{index}.label: {entry.label!r} is used twice")
        sizes[entry.label] = n
    for index, (entry, n) in enumerate(resolved):
        if entry.source is None:
            continue
        key = "stored_peer_from" if entry.stored_peer_from else "library_from"
        sources = [e.label for e in entries if e.source is None]
        if entry.source not in sources:
            raise GridError(f"algorithms.{index}.{key}: {entry.source!r} is not one of {sources}")
        if n != sizes[entry.source]:
            raise GridError(
                f"algorithms.{index}: n={n}, but its source {entry.source!r} stores groups "
                f"of n={sizes[entry.source]}: a stored group must have the receiver's size"
            )
    return tuple(entries)


def default_own_skills(model: str) -> tuple[str, ...] | None:
    """A built-in pair member's own skills (tiny pair, testbed) from its build config;
    None for other models."""
    from graft_env.policies.tiny.config import pair_of

    config = pair_of(model)
    specs = {spec.name: spec.skills for spec in config.models} if config else {}
    return specs.get(model)


def _base_agent_options(base: Mapping[str, Any]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Model -> (key path, options) of the base config's agent of that model."""
    agents = base.get("agents") or []
    return {
        agent.get("model"): (f"base.agents.{index}.options", agent.get("options") or {})
        for index, agent in enumerate(agents)
        if isinstance(agent, Mapping)
    }


def _check_pair_options(
    model_options: Mapping[str, Any], base: Mapping[str, Any], model: str, where: str
) -> None:
    """A pair's options of `model`, over the base agent's, as `load_policy` would take them."""
    base_where, base_options = _base_agent_options(base).get(model, ("", {}))
    try:
        if base_where:
            check_policy_options(base_options, base_where)
        check_policy_options({**base_options, **model_options}, where)
    except ConfigError as error:
        raise GridError(str(error)) from None


def _pairs(
    items: Sequence[PairItem], base: Mapping[str, Any], directory: Path
) -> tuple[PairSpec, ...]:
    pairs = []
    for index, item in enumerate(items):
        where = f"pairs.{index}"
        models = item.models
        if not all(models):
            raise GridError(f"{where}.models: expected two model names, got {list(models)!r}")
        if agent_name(models[0]) == agent_name(models[1]):
            raise GridError(f"{where}.models: both models are named {agent_name(models[0])!r}")
        for key, given in (("options", item.options), ("own_skills", item.own_skills)):
            unknown = sorted(set(given) - set(models))
            if unknown:
                raise GridError(
                    f"{where}.{key}: unknown key(s) {unknown}; valid keys: {sorted(models)}"
                )
        for model, given in item.options.items():
            _check_pair_options(given, base, model, f"{where}.options.{model}")
        own = {}
        for model in models:
            given = item.own_skills.get(model)
            chosen = default_own_skills(model) if given is None else tuple(given)
            unknown = sorted(set(chosen or ()) - set(SKILLS))
            if unknown:
                raise GridError(f"{where}.own_skills.{model}: unknown skills {unknown}")
            if chosen:
                own[agent_name(model)] = tuple(chosen)
        build = None if item.build is None else _pair_build(item, base, directory, where)
        pairs.append(PairSpec((models[0], models[1]), dict(item.options), own, build))
    return tuple(pairs)


def _pair_build(item: PairItem, base: Mapping[str, Any], directory: Path, where: str) -> BuildFiles:
    """A pair's committed build (its path relative to `directory`), checked (`check_build`:
    its weights have the named SHA-256) for members of one built-in pair whose options leave
    `tiny_seed` and `cache_dir` to it."""
    from graft_env.policies.tiny.config import pair_of

    assert item.build is not None
    where = f"{where}.build"
    configs = {model: pair_of(model) for model in item.models}
    if any(c is None for c in configs.values()) or len({c.name for c in configs.values()}) > 1:
        raise GridError(f"{where}: {list(item.models)} are not the two members of a built-in pair")
    base_options = _base_agent_options(base)
    for model in item.models:
        given = {**base_options.get(model, ("", {}))[1], **item.options.get(model, {})}
        for key in BUILD_OPTIONS:
            if key in given:
                raise GridError(
                    f"{where}: {model} sets {key}, which the build sets (its build.json's "
                    f"seed, its directory); remove it"
                )
    try:
        return check_build((directory / item.build.path).resolve(), item.build.weights_sha256)
    except (ValueError, FileNotFoundError) as error:
        raise GridError(f"{where}: {error}") from None


def _check_eval(plan: EvalPlan) -> None:
    known = available_datasets()
    for index, name in enumerate(plan.sets):
        skill = name.split("/", 1)[1] if name.startswith("procedural/") else None
        if (skill is None and name not in known) or (skill is not None and skill not in SKILLS):
            raise GridError(
                f"eval.sets.{index}: unknown set {name!r}; use a dataset {known} or "
                f"procedural/<skill> with a skill in {list(SKILLS)}"
            )
    if len(set(plan.sets)) != len(plan.sets):
        raise GridError(f"eval.sets: a set is named twice in {list(plan.sets)}")
    validate_as(ProceduralOptions, plan.procedural, GridError, "eval.procedural")


def _periodic(given: Mapping[str, Any], plan: EvalPlan) -> PeriodicPlan | None:
    """The periodic plan with `limit` and `k` taken from `eval` where not given (an explicit
    `limit: null` evaluates every problem)."""
    if not given["every"]:
        return None
    limit = given.get("limit", plan.limit)
    return PeriodicPlan(given["every"], limit, given.get("k") or plan.k)


def grid_from_dict(data: Any, directory: Path = Path("."), name: str = "grid") -> GridSpec:
    """Validate plain grid data; relative `base` paths resolve against `directory`."""
    raw = validate_as(GridFile, data, GridError)
    base = deep_merge(_base(raw.base, directory), raw.train)
    for key, per_entry in (("stored_peer", "stored_peer_from"), ("library", "library_from")):
        if base.get(key) is not None:
            raise GridError(
                f"base/train: {key} is set by the grid for each cell (an algorithm's "
                f"{per_entry}); remove it from the run config"
            )
    base_options = base.get("algorithm_options") or {}
    if not isinstance(base_options, Mapping):
        raise GridError(f"base.algorithm_options: expected a mapping, got {base_options!r}")
    if len(set(raw.seeds)) != len(raw.seeds):
        raise GridError(f"seeds: a seed is listed twice in {list(raw.seeds)}")
    entries = _algorithms(raw.algorithms, base_options, len(raw.seeds))
    labels = [entry.label for entry in entries]
    baseline = labels[0] if raw.baseline is None else raw.baseline
    if baseline not in labels:
        raise GridError(f"baseline: {baseline!r} is not an algorithm label; labels: {labels}")
    _check_eval(raw.eval)
    periodic = None if raw.periodic_eval is None else _periodic(data["periodic_eval"], raw.eval)
    if raw.eval.checkpoint == "best" and periodic is None:
        raise GridError("eval.checkpoint: 'best' needs periodic_eval.every > 0 to pick a best")
    return GridSpec(
        name=raw.name or name,
        base=base,
        algorithms=entries,
        pairs=_pairs(raw.pairs, base, directory),
        seeds=raw.seeds,
        baseline=baseline,
        include_base=raw.include_base,
        eval=raw.eval,
        periodic=periodic,
        threads=raw.threads,
        workers=raw.workers,
    )


def _grid_data(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A grid file's data, merged over the grid it `extends` (lists are replaced whole).

    A relative `base` path is made absolute against the file that names it, so a grid can
    extend one in another folder.
    """
    if path.resolve() in seen:
        raise GridError(f"{path}: 'extends' loops back to itself")
    try:
        data = read_yaml_mapping(path, "grid file")
    except ConfigError as error:
        raise GridError(str(error)) from None
    if isinstance(data.get("base"), str):
        data["base"] = str((path.parent / data["base"]).resolve())
    for pair in data.get("pairs") or []:
        build = pair.get("build") if isinstance(pair, Mapping) else None
        if isinstance(build, Mapping) and isinstance(build.get("path"), str):
            build["path"] = str((path.parent / build["path"]).resolve())
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
    try:
        for assignment in overrides:
            apply_override(data, assignment)
        return grid_from_dict(data, path.parent, path.stem)
    except GridError as error:
        raise GridError(f"{path}: {error}") from None
