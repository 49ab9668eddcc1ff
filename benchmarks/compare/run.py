"""`graft compare`: every cell of a grid through the one training loop, then the harness.

For each cell (see `benchmarks.compare.cells`): `algorithms.training.loop.Trainer(config).train()`
(which resumes an interrupted run from its own checkpoints), then `graft_env.eval.evaluate`
on each updated model's best or final checkpoint. The cell's ``result.json`` records the
config and its hash, the seed, package versions and git commit (`report.run_provenance`),
timings, every evaluation result (with per-problem success counts), the learning curves,
and each training step's per-prompt success counts k, from which the report computes the
complementarity curve and the rollouts generated up to the evaluated checkpoint.

Cells are claimed, not assigned: a process takes the first cell in plan order that is
unfinished, not held by a live process, and whose sources (a stored peer's run, a library's
runs) are finished, by writing a lock file (its pid and host) into the cell's directory. So
the grid's `workers` processes, and any other `graft compare` on the same --out, share the
cells without running one twice; the lock of a process that died is taken over, so a killed
run resumes instead of waiting.

    grid = load_grid("configs/compare_tiny.yaml")
    results = run_grid(grid, "runs/compare/tiny")
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import textwrap
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import wait
from multiprocessing.queues import SimpleQueue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, TextIO

import pyarrow.dataset as ds
from rich.console import Console

from algorithms.storage.store import TrajectoryStore
from algorithms.training.checkpoint import latest_checkpoint
from algorithms.training.eval_settings import sampling_args
from algorithms.training.periodic_eval import eval_sets
from benchmarks.compare.cells import (
    RESULT_FILE,
    STARTED_FILE,
    Cell,
    changed_cells,
    out_of,
    plan_cells,
    portable_result,
    read_result,
    remove_cell,
)
from benchmarks.compare.claims import claim_next, release, remove_locks_of
from benchmarks.compare.grid import GridError, GridSpec
from graft_env.data import Problem
from graft_env.eval.report import result_dict, run_provenance
from graft_env.threads import resolve_threads, torch_threads

EVAL_METRIC = "eval/average/pass@1"
POLL_SECONDS = 2.0  # between looks at cells that others hold or that wait for a source
PARENT_POLL_SECONDS = 1.0  # between a worker's looks at whether its parent is alive
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def eval_problems(grid: GridSpec, limit: int | None) -> dict[str, list[Problem]]:
    """The grid's evaluation sets, first `limit` problems each (`procedural/<skill>`:
    the skill's held-out test split with the grid's procedural options)."""
    data_dir = (grid.base.get("env") or {}).get("data_dir")
    return eval_sets(grid.eval.sets, data_dir, limit, grid.eval.procedural, grid.eval.distinct)


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write atomically: a result file that exists is complete."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def _train_counts(run_dir: Path, agents: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """Per agent and step: prompt ids and success counts k of the groups it trained on,
    from the trajectory store."""
    root = run_dir / "trajectories"
    if not root.is_dir():
        return {agent: [] for agent in agents}
    TrajectoryStore(run_dir).verify(before_step=sys.maxsize)  # every file against its digest
    table = ds.dataset(root, format="parquet").to_table(
        columns=["agent", "step", "prompt_index", "prompt_id", "reward"]
    )
    counts: dict[tuple[str, int], dict[int, list]] = defaultdict(dict)
    for agent, step, index, prompt_id, reward in zip(*table.to_pydict().values(), strict=True):
        group = counts[(agent, step)].setdefault(index, [prompt_id, 0])
        group[1] += int(reward == 1.0)
    out: dict[str, list[dict[str, Any]]] = {agent: [] for agent in agents}
    for (agent, step), groups in sorted(counts.items()):
        ordered = [groups[i] for i in sorted(groups)]
        out[agent].append(
            {
                "step": step,
                "prompt_ids": [g[0] for g in ordered],
                "k": [g[1] for g in ordered],
            }
        )
    return out


def run_summary(cell: Cell, checkpoint: str) -> dict[str, dict[str, Any]]:
    """Per agent of a finished run: the checkpoint to evaluate (best or final) and what the
    run directory says about it: learning curves, per-step k, rollouts and seconds to it."""
    run_dir = Path(cell.config.run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    counts = _train_counts(run_dir, cell.agents)
    final = latest_checkpoint(run_dir / "checkpoints")
    if final is None or final[1]["step"] != cell.config.steps:
        raise GridError(f"cell {cell.cell_id}: no intact final checkpoint in {run_dir}")
    out = {}
    for agent in cell.agents:
        mine = [row for row in rows if row["agent"] == agent]
        best_file = run_dir / "best" / agent / "best.json"
        best = json.loads(best_file.read_text()) if best_file.is_file() else None
        if checkpoint == "best":
            path, completed = best_file.parent, best["step"] + 1
        else:
            path, completed = final[0] / agent, cell.config.steps
        # every agent's row of a step carries that step's (shared) phase timings
        phases = [
            seconds
            for row in mine
            if row["step"] < completed
            for key, seconds in row.items()
            if key.startswith("time/") and key != "time/eval"
        ]
        # sampled responses, not stored ones: dynamic sampling discards some it drew
        rollouts = [row["rollouts_generated"] for row in mine if row["step"] < completed]
        evals = [row for row in mine if EVAL_METRIC in row]
        out[agent] = {
            "checkpoint": str(path),
            "checkpoint_steps": completed,
            "best": best,
            "train_seconds_to_checkpoint": sum(phases),  # phases are per step, shared
            "rollouts_to_checkpoint": sum(rollouts),
            "curves": {
                # reward of step t's rollouts: the policy after t updates
                "step": [row["step"] for row in mine],
                "reward_mean": [row["reward_mean"] for row in mine],
                # evaluation after step t: the policy after t + 1 updates
                "eval_step": [row["step"] + 1 for row in evals],
                "eval_average": [row[EVAL_METRIC] for row in evals],
            },
            "train_counts": counts[agent],
        }
    return out


def cell_library(cell: Cell) -> Path:
    """A graft-library cell's library: the partner's groups of the cell's source runs,
    built at the cell's first start; a resumed cell reads the one it started with (its
    checkpoints record that library's digest, and the run refuses another)."""
    from algorithms.library.build import run_groups
    from algorithms.library.format import write_library

    path = Path(cell.config.library.path)
    if not path.is_dir():  # written whole or not at all (write_library renames it into place)
        data_dir = cell.config.env.data_dir
        runs = [run_groups(run, data_dir) for run in cell.library_runs]
        write_library([g for run in runs for g in run if g.agent == cell.partner], path, False)
    return path


def run_cell(
    cell: Cell,
    grid: GridSpec,
    final_sets: Mapping[str, list[Problem]],
) -> dict[str, Any]:
    """Train (or resume) one cell, evaluate its models, write and return its result."""
    from algorithms.training.loop import Trainer
    from benchmarks.commands.eval import write_outputs
    from graft_env.eval.evaluate import evaluate
    from graft_env.policies import load_policy

    provenance = run_provenance()
    started = time.perf_counter()
    cell.directory.mkdir(parents=True, exist_ok=True)
    _write_json(
        cell.directory / STARTED_FILE, {"cell": cell.cell_id, "config_hash": cell.config_hash}
    )
    runs: dict[str, dict[str, Any]] = {}
    resumed_at = None
    if cell.config is not None:
        found = latest_checkpoint(Path(cell.config.run_dir) / "checkpoints")
        resumed_at = int(found[1]["step"]) if found else 0
        if cell.library_cells:
            cell_library(cell)
        Trainer(cell.config).train()
        runs = run_summary(cell, grid.eval.checkpoint)
    train_seconds = time.perf_counter() - started
    plan = grid.eval
    models = {}
    for agent, model in cell.models.items():
        path = runs[agent]["checkpoint"] if runs else model
        policy = load_policy(path, **cell.agent_options[agent])
        result = evaluate(
            policy,
            final_sets,
            **sampling_args(plan),
            repeats=plan.repeats,
            batch_size=plan.batch_size,
        )
        write_outputs(result, cell.directory / "eval" / agent)
        models[agent] = {"model": model, **runs.get(agent, {}), "eval": result_dict(result)}
    result = {
        "cell": cell.cell_id,
        "config_hash": cell.config_hash,
        "label": cell.label,
        "algorithm": cell.algorithm,
        "pair": list(cell.pair.agents),
        "own_skills": {a: list(s) for a, s in cell.pair.own_skills.items()},
        "seed": cell.seed,
        "stored_peer_cell": cell.stored_peer_cell,
        "library_cells": list(cell.library_cells),
        "config": None if cell.config is None else cell.config.to_dict(),
        "agent_options": cell.agent_options,
        "eval_plan": dataclasses.asdict(grid.eval),
        "provenance": provenance,
        "timings": {  # of this invocation; a resumed run trained from step `resumed_at`
            "resumed_at": resumed_at,
            "train_seconds": train_seconds,
            "eval_seconds": time.perf_counter() - started - train_seconds,
            "cell_seconds": time.perf_counter() - started,
        },
        "models": models,
    }
    result = portable_result(result, out_of(cell))  # paths relative to the grid's --out
    _write_json(cell.directory / RESULT_FILE, result)
    return result


def _headline(result: Mapping[str, Any]) -> str:
    parts = []
    for agent, model in result["models"].items():
        average = model["eval"]["average"]["pass@1"]
        parts.append(f"{agent} pass@1 {100 * average:.1f}%")
    return ", ".join(parts)


def finished_results(grid: GridSpec, out_dir: str | Path) -> list[dict[str, Any]]:
    """The results of the grid's finished cells (for reports on a partly run grid)."""
    results = [read_result(cell) for cell in plan_cells(grid, out_dir)]
    found = [result for result in results if result is not None]
    if not found:
        raise GridError(f"no finished cells of grid {grid.name!r} under {out_dir}")
    return found


class CellFailed(GridError):
    """A cell raised; the message names the cell (the traceback went to stderr)."""


def _one_line(error: BaseException) -> str:
    """An error as one short line (a worker's error travels to the parent through a pipe)."""
    return textwrap.shorten(f"{type(error).__name__}: {error}", width=400, placeholder=" ...")


def _work(
    grid: GridSpec,
    cells: Sequence[Cell],
    out_dir: Path,
    console: Console,
    stop: Callable[[], bool],
) -> dict[str, dict[str, Any]]:
    """Claim and run cells until none is left or `stop()`: the one scheduler, run by this
    process (one worker) or by each worker process. Returns the results it produced."""
    final_sets = None
    ran: dict[str, dict[str, Any]] = {}
    waited: tuple[str, ...] = ()
    with torch_threads(resolve_threads(grid.threads)):
        while not stop():
            claim = claim_next(cells, out_dir, console.print, ran)
            cell = claim.cell
            if cell is None:
                if not claim.waiting:
                    break
                if claim.waiting != waited:
                    console.print(
                        f"waiting for {len(claim.waiting)} cell(s): " + ", ".join(claim.waiting)
                    )
                    waited = claim.waiting
                time.sleep(POLL_SECONDS)
                continue
            where = f"[{cells.index(cell) + 1}/{len(cells)}] {cell.cell_id}"
            try:
                if final_sets is None:
                    final_sets = eval_problems(grid, grid.eval.limit)
                console.rule(f"{where}: {'training' if cell.config else 'evaluating'}")
                result = run_cell(cell, grid, final_sets)
            except Exception as error:
                # a cell may fail after an hour: the whole traceback for the log, then one line
                traceback.print_exc()
                raise CellFailed(f"cell {cell.cell_id} failed: {_one_line(error)}") from error
            finally:
                release(cell)
            ran[cell.cell_id] = result
            console.print(
                f"{where}: done in {result['timings']['cell_seconds']:.0f} s ({_headline(result)})"
            )
    return ran


class _Prefixed(io.TextIOBase):
    """A worker's stdout or stderr: every line starts with the worker's prefix and goes out
    whole, so the lines of workers sharing a terminal interleave but never mix. Not a
    terminal, so rich prints a training run's progress as lines rather than live bars."""

    def __init__(self, stream: TextIO, prefix: str) -> None:
        self._stream, self._prefix, self._partial = stream, prefix, ""

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        if lines:
            self._stream.write("".join(f"{self._prefix}{line}\n" for line in lines))
            self._stream.flush()
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._stream.fileno()


def _worker(
    number: int,
    grid: GridSpec,
    cells: Sequence[Cell],
    out_dir: Path,
    stop: Event,
    failures: SimpleQueue[tuple[int, str]],
    log_level: int,
    parent: int,
) -> None:
    """One worker process of `run_grid`: `_work` with output lines prefixed [w<number>]."""
    _exit_with_parent(parent)  # the pid the parent gave: it may be gone before we get here
    prefix = f"[w{number}] "
    sys.stdout, sys.stderr = (_Prefixed(s, prefix) for s in (sys.stdout, sys.stderr))
    logging.basicConfig(level=log_level, format=LOG_FORMAT)
    console = Console(stderr=True, width=shutil.get_terminal_size().columns - len(prefix))
    try:
        _work(grid, cells, out_dir, console, stop.is_set)
    except KeyboardInterrupt:  # Ctrl-C reached the parent too, which says so
        sys.exit(130)
    except CellFailed as error:  # its traceback is out already
        failures.put((number, str(error)))
        sys.exit(1)
    except Exception as error:
        traceback.print_exc()
        failures.put((number, f"worker {number}: {_one_line(error)}"))
        sys.exit(1)


def _exit_with_parent(parent: int) -> None:
    """End this worker when `parent` is gone (killed without the chance to stop its workers,
    e.g. SIGKILL): an orphan would go on training cells nobody collects, beside the next
    run's workers. Its cell's lock then names a dead pid, which the next run takes over."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (a scheduler's or `kill`'s stop) as an exit, so `_run_workers` stops its
    workers in its `finally` instead of leaving them running."""
    raise SystemExit(128 + signum)


def _run_workers(grid: GridSpec, cells: Sequence[Cell], out_dir: Path, workers: int) -> None:
    """`_work` in `workers` processes, started with spawn (torch is not fork-safe). After a
    worker fails the others start no new cell (they finish theirs); then a GridError lists
    each failure by cell."""
    context = multiprocessing.get_context("spawn")
    stop, failures = context.Event(), context.SimpleQueue()
    level = logging.getLogger().getEffectiveLevel()
    running = {}
    main = threading.current_thread() is threading.main_thread()  # signals need it
    previous = signal.getsignal(signal.SIGTERM)
    ended = []
    try:  # from the handler on: a SIGTERM while workers start still stops the started ones
        if main:
            signal.signal(signal.SIGTERM, _stop_on_sigterm)
        for number in range(1, workers + 1):
            args = (number, grid, cells, out_dir, stop, failures, level, os.getpid())
            process = context.Process(target=_worker, args=args, name=f"graft-compare-w{number}")
            process.start()
            running[process.sentinel] = (number, process)
        while running:
            for sentinel in wait(list(running)):
                number, process = running.pop(sentinel)
                process.join()
                ended.append((number, process))
                if process.exitcode != 0:
                    stop.set()
    finally:
        stop.set()
        for _, process in running.values():  # only after an interruption of this process
            process.join(timeout=5)
            process.terminate()
            process.join()
        if main:
            signal.signal(signal.SIGTERM, previous)
    reported = {}
    while not failures.empty():
        number, message = failures.get()
        reported[number] = message
    errors = []
    for number, process in sorted(ended):
        if process.exitcode == 0:
            continue
        message = reported.get(number)
        if message is None:  # killed, or interrupted: its lock is stale now, remove it
            held = remove_locks_of(cells, process.pid)
            message = f"worker {number} ended with exit code {process.exitcode}" + "".join(
                f" in cell {cell.cell_id}" for cell in held
            )
        errors.append(message)
    if errors:
        raise GridError("; ".join(errors))


def run_grid(
    grid: GridSpec,
    out_dir: str | Path,
    *,
    redo_changed: bool = False,
    console: Console | None = None,
) -> list[dict[str, Any]]:
    """Run every unfinished cell of `grid` under `out_dir`, `grid.workers` at a time; returns
    every cell's result in plan order, whichever process ran it.

    Cells whose directory holds a run of another config stop the grid with a GridError
    listing them, unless `redo_changed` (then they are deleted and run again).
    """
    console = console or Console(stderr=True)
    out_dir = Path(out_dir)
    # built first: a cell's hash holds its models' weights digest (model_identity)
    cells = plan_cells(grid, out_dir, build=True)
    stale = changed_cells(cells)
    if stale and not redo_changed:
        names = ", ".join(cell.cell_id for cell in stale)
        raise GridError(f"cells run with another config: {names}; use --redo-changed")
    for cell in stale:
        remove_cell(cell)
    found = [read_result(cell) for cell in cells]
    for number, (cell, result) in enumerate(zip(cells, found, strict=True), 1):
        if result is not None:
            where = f"[{number}/{len(cells)}] {cell.cell_id}"
            console.print(f"{where}: finished earlier, skipped ({_headline(result)})")
    workers = min(grid.workers, found.count(None))  # a process per cell left at most
    ran = {}
    if workers <= 1:
        ran = _work(grid, cells, out_dir, console, lambda: False)
    else:
        _run_workers(grid, cells, out_dir, workers)
    results = [ran.get(cell.cell_id) or read_result(cell) for cell in cells]
    missing = [cell.cell_id for cell, result in zip(cells, results, strict=True) if result is None]
    if missing:
        raise GridError(f"cells not finished: {', '.join(missing)}")
    return results
