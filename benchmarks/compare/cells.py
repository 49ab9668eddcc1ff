"""The cells of a comparison grid: which runs there are, their configs, and their state on disk.

A cell is one training run: an algorithm x a model (single-agent algorithms such as GRPO
train each model of a pair alone) or the whole pair (exchange algorithms) x a seed; plus,
with `include_base`, one evaluation-only cell per untrained model. A cell lives in
``<out>/cells/<label>/<agents>[/seed<k>]/`` with the Trainer's run directory in ``run/``.

Each cell has a config hash over its run config (less where and how fast: run_dir, the sources'
paths, the models' cache_dir, threads), the options its algorithm and strategy read
(`options_read`: the shared ones and its strategy's own and inherited; another strategy's
options, held at their defaults, are left out, so a new option elsewhere keeps every cell
valid), the evaluation plan, its sources' hashes and the models its names resolve to: a built-in
pair's cache key and the SHA-256 of the built weights (`model_identity`), so a finished result
is reused only for exactly the same experiment: rebuilding the tiny pair with other skills,
changing the learning rate, or the same cache key built into other weights (another CPU or
thread count) makes the old result stale, and `read_result` says so instead of reusing it. The
weights exist only once the pair is built: `plan_cells(..., build=True)` builds missing built-in
pairs (`grid_models`) before it hashes, as a run of the grid must; without it (reports, config
checks) an unbuilt pair hashes as unbuilt, which matches no result trained on a build. A grid
pair's committed build (`build:`) loads from its directory in the repository, checked against
the weights SHA-256 the grid names, so cells can be split across machines. `Cell.hash_inputs` is
what was hashed: diff it to see why a cell went stale. A result records its paths relative to
the grid's output (`portable_result`).

Package versions and the git commit are not hashed (results record them; the report lists
each code version): any upgrade or commit would make every cell stale, even one computing the
same. A rebuilt model changes the weights digest, a changed default `resolved_algorithm`; a
code change that alters results otherwise keeps the hash: rerun into a new `--out`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import algorithms
from algorithms.exchange.base import options_read
from algorithms.training.eval_settings import EvalSettings, as_recorded
from algorithms.training.run_config import TrainConfig, config_from_dict, without_inert_eval
from benchmarks.compare.grid import (
    AlgorithmEntry,
    GridError,
    GridSpec,
    PairSpec,
    agent_name,
    deep_merge,
    slug,
)
from graft_env.policies.cache import WEIGHT_SUFFIXES, default_cache_dir, weights_sha256
from graft_env.policies.zoo import BUILT_NAMES, REAL_NAMES

RESULT_FILE = "result.json"
STARTED_FILE = "cell.json"
BASE_LABEL = "base"
LIBRARY_DIR = "library"  # a graft-library cell's library, built from its source runs


@dataclass(frozen=True)
class Cell:
    """One run of the grid; `config` is None for a base-model (evaluation-only) cell."""

    cell_id: str
    directory: Path
    label: str
    algorithm: str | None
    pair: PairSpec
    models: Mapping[str, str]  # agent name -> model name or path, for the agents it trains
    agent_options: Mapping[str, Mapping[str, Any]]
    seed: int | None
    config: TrainConfig | None
    stored_peer_cell: str | None
    config_hash: str
    library_cells: tuple[str, ...] = ()  # graft-library: the cells whose runs make its library
    library_runs: tuple[Path, ...] = ()  # their run directories
    hash_inputs: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """What `config_hash` is the SHA-256 of (JSON, sorted keys): diff two to see what changed."""

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(self.models)

    @property
    def sources(self) -> tuple[str, ...]:
        """The cells whose runs this one reads: they finish first."""
        return ((self.stored_peer_cell,) if self.stored_peer_cell else ()) + self.library_cells

    @property
    def partner(self) -> str:
        """The pair's agent this cell does not train (a stored peer's or library's source)."""
        return next(a for a in self.pair.agents if a not in self.models)


UNBUILT = "unbuilt"  # a built-in pair's weights digest before the pair is built


def model_identity(model: str, options: Mapping[str, Any], build: bool = False) -> str:
    """What a model name loads: a built-in pair's build (tiny pair, testbed: its cache key
    and `@` the SHA-256 of its built weights, or `@unbuilt`; `build`: build it first), a
    real model's name, or the resolved path (`@` its weights' SHA-256 where it has any)."""
    if model in BUILT_NAMES:
        from graft_env.policies.tiny.config import cache_key, pair_of

        config = pair_of(model)
        seed = int(options.get("tiny_seed", 0))
        name = f"{config.name}-{cache_key(config, seed)}"
        cache = options.get("cache_dir")
        built = Path(cache or default_cache_dir()) / name
        if build and not (built / "build.json").is_file():
            from graft_env.policies.zoo import model_path

            model_path(model, cache_dir=cache, tiny_seed=seed)  # builds the pair
        digest = _weights_digest(built / model) if (built / "build.json").is_file() else UNBUILT
        return f"{name}/{model}@{digest}"
    if model in REAL_NAMES:
        return model
    path = Path(model).resolve()
    has_weights = path.is_dir() and any(p.suffix in WEIGHT_SUFFIXES for p in path.iterdir())
    return f"{path}@{_weights_digest(path)}" if has_weights else str(path)


def _weights_digest(model_dir: Path) -> str:
    """`weights_sha256`, read once per planning for every cell of the model: keyed by the
    weight files' sizes and modification times, so a changed file is read again."""
    files = sorted(p for p in model_dir.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    stamps = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _cached_digest(model_dir, stamps)


@functools.lru_cache(maxsize=64)
def _cached_digest(model_dir: Path, stamps: tuple) -> str:
    return weights_sha256(model_dir)


def grid_models(grid: GridSpec, build: bool = False) -> dict[str, str]:
    """model -> `model_identity` of every model the grid's pairs name; `build`: first build
    the built-in pairs not built yet (what the first cell would build), so that the cells'
    hashes hold their weights."""
    return {
        m: model_identity(m, _agent_options(grid, pair, m), build)
        for pair in grid.pairs
        for m in pair.models
    }


def _agent_options(grid: GridSpec, pair: PairSpec, model: str) -> dict[str, Any]:
    """The base config's agent options for this model, updated by the pair's own; a pair's
    committed build adds its seed and the directory it lies in (`BuildFiles.cache_dir`)."""
    base = {a.get("model"): a.get("options") or {} for a in grid.base.get("agents") or []}
    options = {**base.get(model, {}), **pair.options.get(model, {})}
    if pair.build is not None:
        options |= {"tiny_seed": pair.build.seed, "cache_dir": pair.build.cache_dir}
    return options


def _without_where(options: Mapping[str, Any]) -> dict[str, Any]:
    """Agent options less `cache_dir`: where a model is kept, not what it is (its identity,
    the build's key and weights SHA-256, is hashed instead)."""
    return {key: value for key, value in options.items() if key != "cache_dir"}


def _periodic_eval(grid: GridSpec) -> dict[str, Any]:
    """The run config's `eval` section: the grid's sets, smaller, every m steps."""
    if grid.periodic is None:
        return {"every": 0}
    shared = {f.name: getattr(grid.eval, f.name) for f in dataclasses.fields(EvalSettings)}
    return {
        **shared,  # the final evaluation's settings, on fewer problems and samples
        "procedural": dict(grid.eval.procedural),
        "every": grid.periodic.every,
        "datasets": list(grid.eval.sets),
        "k": grid.periodic.k,
        "limit": grid.periodic.limit,
    }


def _train_config(
    grid: GridSpec,
    entry: AlgorithmEntry,
    agents: Mapping[str, str],
    options: Mapping[str, Mapping[str, Any]],
    seed: int,
    directory: Path,
    peer: Mapping[str, str] | None,
    library: bool,
) -> TrainConfig:
    changes = {
        "algorithm": entry.name,
        "algorithm_options": dict(entry.options),
        "seed": seed,
        "run_dir": str(directory / "run"),
        "eval": _periodic_eval(grid),
    }
    data = deep_merge(grid.base, changes)
    data["agents"] = [{"name": a, "model": m, "options": options[a]} for a, m in agents.items()]
    data["stored_peer"] = None if peer is None else dict(peer)
    data["library"] = {"path": str(directory / LIBRARY_DIR)} if library else None
    return config_from_dict(data)


def make_cell(
    grid: GridSpec,
    out_dir: Path,
    entry: AlgorithmEntry | None,
    pair: PairSpec,
    models: Sequence[str],
    seed: int | None,
    source: Cell | None = None,
    library: Sequence[Cell] = (),
    identities: Mapping[str, str] | None = None,
) -> Cell:
    """One cell; `source` is the cell whose trajectory store a stored-peer run replays,
    `library` the cells whose partner runs make a graft-library run's library; `identities`
    (model -> `model_identity`) stand in for the models' builds (cells of recorded weights)."""
    agents = {agent_name(m): m for m in models}
    label = entry.label if entry else BASE_LABEL
    cell_id = f"{slug(label)}/{'+'.join(agents)}" + ("" if seed is None else f"/seed{seed}")
    directory = out_dir / "cells" / cell_id
    options = {a: _agent_options(grid, pair, m) for a, m in agents.items()}
    train = None
    config = None
    if entry is not None:
        peer = None
        if source is not None:
            partner = next(a for a in pair.agents if a not in agents)
            peer = {"run_dir": str(source.directory / "run"), "agent": partner}
        try:
            config = _train_config(
                grid, entry, agents, options, seed, directory, peer, bool(library)
            )
        except ValueError as error:
            raise GridError(f"cell {cell_id}: {error}") from None
        # where and how fast, not what: moving --out or changing threads keeps the hash
        ignored = ("run_dir", "stored_peer", "library", "threads")
        train = {k: v for k, v in without_inert_eval(config.to_dict()).items() if k not in ignored}
        train["agents"] = [{**a, "options": _without_where(a["options"])} for a in train["agents"]]
        # the resolved options, not just the entry's name: a changed preset or default
        # (e.g. the sample std of Eq.1) must retrain the cell, never reuse it; only those the
        # cell's algorithm and strategy read, so a new option elsewhere leaves it valid
        resolved = algorithms.configure(config.algorithm, **config.algorithm_options)
        train["resolved_algorithm"] = options_read(resolved)
    identities = identities or {}
    payload = {
        "train": train,
        "stored_peer": [source.cell_id, source.config_hash] if source else None,
        **({"library": [[c.cell_id, c.config_hash] for c in library]} if library else {}),
        "eval": as_recorded(dataclasses.asdict(grid.eval)),
        "models": {
            a: identities.get(m) or model_identity(m, options[a]) for a, m in agents.items()
        },
        "options": {a: _without_where(o) for a, o in options.items()},
    }
    return Cell(
        cell_id=cell_id,
        directory=directory,
        label=label,
        algorithm=entry.name if entry else None,
        pair=pair,
        models=agents,
        agent_options=options,
        seed=seed,
        config=config,
        stored_peer_cell=source.cell_id if source else None,
        config_hash=payload_hash(payload),
        library_cells=tuple(c.cell_id for c in library),
        library_runs=tuple(c.directory / "run" for c in library),
        hash_inputs=payload,
    )


def payload_hash(payload: Mapping[str, Any]) -> str:
    """A cell's config hash: the first 16 hex digits of the SHA-256 of its inputs' JSON."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]


def _library_seeds(seeds: Sequence[int], seed: int, runs: int) -> list[int]:
    """The seeds of the `runs` runs that make the library of a cell at `seed`: those after
    it in `seeds`, cyclically, never `seed` itself (other seeds, other prompt orders)."""
    at = list(seeds).index(seed)
    return [seeds[(at + j) % len(seeds)] for j in range(1, runs + 1)]  # runs < len(seeds)


Trained = dict[tuple[str, str, str, int], Cell]  # (label, pair, agent, seed) -> its cell


def _entry_cells(
    grid: GridSpec,
    out_dir: Path,
    entry: AlgorithmEntry,
    seed: int,
    trained: Trained,
    identities: Mapping[str, str] | None,
) -> list[Cell]:
    """The cells of one algorithm at one seed, for every pair; their sources (a stored
    peer's or a library's runs) are looked up in `trained`, which gets the new cells."""
    cells = []
    for pair in grid.pairs:
        for models in [[m] for m in pair.models] if entry.single_agent else [pair.models]:
            partner = next(a for a in pair.agents if a != agent_name(models[0]))
            source = None
            if entry.stored_peer_from is not None:
                source = trained[(entry.stored_peer_from, pair.pair_id, partner, seed)]
            library = [
                trained[(entry.library_from, pair.pair_id, partner, s)]
                for s in _library_seeds(grid.seeds, seed, entry.library_runs)
            ]
            cell = make_cell(grid, out_dir, entry, pair, models, seed, source, library, identities)
            trained.update({(entry.label, pair.pair_id, a, seed): cell for a in cell.agents})
            cells.append(cell)
    return cells


def plan_cells(
    grid: GridSpec,
    out_dir: str | Path,
    *,
    build: bool = False,
    identities: Mapping[str, str] | None = None,
) -> list[Cell]:
    """Every cell: base evaluations first, then seed by seed, so an interrupted grid is a
    complete table for its first seeds. Within a seed, stored-peer runs come after the
    runs whose stores they read; graft-library runs, which read runs of other seeds, come
    after every other cell. `build`: build missing built-in pairs first (`build_models`),
    as a run of the grid must; without it their cells hash as unbuilt. `identities`: model ->
    `model_identity` to hash with instead of the builds (`benchmarks.compare.rehash`)."""
    if build:
        grid_models(grid, build=True)
    out_dir = Path(out_dir).resolve()  # result files name checkpoints readable from anywhere
    cells: list[Cell] = []
    if grid.include_base:
        done: set[str] = set()
        for pair in grid.pairs:
            for model in pair.models:
                if agent_name(model) not in done:
                    done.add(agent_name(model))
                    cell = make_cell(grid, out_dir, None, pair, [model], None, None, (), identities)
                    cells.append(cell)
    trained: Trained = {}
    # runs of one seed (stored peers after their sources), then the libraries across seeds
    within_seed = sorted(
        (e for e in grid.algorithms if not e.library_runs), key=lambda e: e.source is not None
    )
    for seed in grid.seeds:
        for entry in within_seed:
            cells += _entry_cells(grid, out_dir, entry, seed, trained, identities)
    for seed in grid.seeds:
        for entry in (e for e in grid.algorithms if e.library_runs):
            cells += _entry_cells(grid, out_dir, entry, seed, trained, identities)
    return cells


def out_of(cell: Cell) -> Path:
    """The grid output a cell's directory is in (``<out>/cells/<cell id>``)."""
    return cell.directory.parents[len(Path(cell.cell_id).parts)]


def portable_result(result: Mapping[str, Any], out: str | Path) -> dict[str, Any]:
    """`result` with every path under the grid output `out` written relative to it
    (``cells/<cell id>/run/...``), so a committed result names no machine's directories;
    the hash never held them (`make_cell` leaves run_dir, stored_peer and library out)."""
    prefix = f"{Path(out)}/" if str(out) else None

    def relative(value: Any) -> Any:
        if isinstance(value, str):
            return value.removeprefix(prefix) if prefix else value
        if isinstance(value, dict):
            return {key: relative(item) for key, item in value.items()}
        if isinstance(value, list):
            return [relative(item) for item in value]
        return value

    return relative(dict(result))


def read_result(cell: Cell) -> dict[str, Any] | None:
    """The cell's finished result, or None; a GridError if its directory holds another config."""
    for name in (RESULT_FILE, STARTED_FILE):
        path = cell.directory / name
        if path.is_file():
            found = json.loads(path.read_text()).get("config_hash")
            if found != cell.config_hash:
                raise GridError(
                    f"cell {cell.cell_id}: {path} was written for another config or other model "
                    f"weights (a pair built on another CPU hashes differently; hash "
                    f"{found}, now {cell.config_hash}); use another --out or --redo-changed"
                )
    path = cell.directory / RESULT_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def changed_cells(cells: Sequence[Cell]) -> list[Cell]:
    """The cells whose directory holds a run of another config."""
    changed = []
    for cell in cells:
        try:
            read_result(cell)
        except GridError:
            changed.append(cell)
    return changed


def remove_cell(cell: Cell) -> None:
    """Delete a cell's directory (used by --redo-changed for stale cells only)."""
    shutil.rmtree(cell.directory)
