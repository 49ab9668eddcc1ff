"""One cell of `graft compare`: train (or resume) it through the one training loop, evaluate
each updated model's best or final checkpoint, write its ``result.json``.

The result records the config and its hash, the seed, package versions and git commit
(`report.run_provenance`), timings, every evaluation result (with per-problem success
counts), the learning curves, and each training step's per-prompt success counts k
(`run_summary`, from the run's trajectory store).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import textwrap
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from algorithms.storage.store import TrajectoryStore
from algorithms.training.checkpoint import has_checkpoints, latest_checkpoint
from algorithms.training.eval_settings import sampling_args
from algorithms.training.periodic_eval import EVAL_TIMES, eval_sets
from benchmarks.compare.cells import RESULT_FILE, STARTED_FILE, Cell, out_of, portable_result
from benchmarks.compare.grid import GridError, GridSpec
from graft_env.data import Problem
from graft_env.eval.report import result_dict, run_provenance

EVAL_METRIC = "eval/average/pass@1"


def eval_problems(grid: GridSpec, limit: int | None) -> dict[str, list[Problem]]:
    """The grid's evaluation sets, first `limit` problems each (`procedural/<skill>`:
    the skill's held-out test split with the grid's procedural options)."""
    data_dir = (grid.base.get("env") or {}).get("data_dir")
    plan = grid.eval
    return eval_sets(plan.sets, data_dir, limit, plan.procedural, plan.distinct, plan.source)


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
            if key.startswith("time/") and key not in EVAL_TIMES
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
        checkpoints = Path(cell.config.run_dir) / "checkpoints"
        found = latest_checkpoint(checkpoints)
        resumed_at = int(found[1]["step"]) if found else 0
        if cell.library_cells:
            cell_library(cell)
        # a cell is its config's computation: one whose checkpoints are all unusable
        # starts over (its files kept in earlier-*/) rather than stopping the grid
        start = "restart" if found is None and has_checkpoints(checkpoints) else "resume"
        Trainer(cell.config, start=start).train()
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


class CellFailed(GridError):
    """A cell raised; the message names the cell (the traceback went to stderr)."""


def one_line(error: BaseException) -> str:
    """An error as one short line (a worker's error travels to the parent through a pipe)."""
    return textwrap.shorten(f"{type(error).__name__}: {error}", width=400, placeholder=" ...")
