"""Build a trajectory library from the trajectory stores of finished (or running) runs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from algorithms.library.format import LibraryError, LibraryGroup, prompt_key, write_library
from algorithms.storage.store import StoreError, TrajectoryStore
from algorithms.storage.yaml_schema import parse_yaml


def _run_models(run_dir: Path) -> dict[str, str]:
    """Agent name -> model (registry name or path), from the run's config.yaml."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise LibraryError(f"{path} is missing: the run's models are unknown")
    agents = parse_yaml(path.read_text()).get("agents") or []
    return {agent["name"]: str(agent["model"]) for agent in agents}


def run_groups(run_dir: str | os.PathLike, data_dir: str | os.PathLike | None = None):
    """Every stored group of one run, each store file checked against its digest.

    The problem text (the key) comes from the run's dataset, loaded as its store's
    `_meta.json` describes it; `generated_at` is when the step's store file was written
    (its mtime: copy run directories with their times, e.g. `cp -p`, `rsync -t`). The
    tokenizer id is the model's: this project's policies load the tokenizer from the
    model path."""
    from graft_env.data import load

    root = Path(run_dir).resolve()
    store = TrajectoryStore(root)
    meta = store.read_meta()
    problems = {
        problem.id: problem
        for problem in load(meta["dataset"], meta["split"], data_dir, **meta["dataset_options"])
    }
    models = _run_models(root)
    dataset = f"{meta['dataset']}/{meta['split']}"
    for folder in sorted(store.root.glob("step_*")):
        step = int(folder.name.removeprefix("step_"))
        for path in sorted(folder.glob("*.parquet")):
            agent = path.stem
            if agent not in models:
                raise StoreError(f"{path}: agent {agent!r} is not in {root / 'config.yaml'}")
            stored = store.read(step, agent, meta["n"])
            for p, prompt_id in enumerate(stored.prompt_ids):
                if prompt_id not in problems:
                    raise StoreError(f"{path}: prompt {prompt_id!r} is not in {dataset}")
                problem = problems[prompt_id].problem
                yield LibraryGroup(
                    group_id=f"{root}#{agent}/{step}/{p}",
                    key=prompt_key(problem),
                    problem=problem,
                    dataset=dataset,
                    prompt_id=prompt_id,
                    source=str(root),
                    agent=agent,
                    model_id=models[agent],
                    tokenizer_id=models[agent],
                    step=step,
                    generated_at=path.stat().st_mtime,
                    texts=stored.texts[p],
                    token_ids=stored.token_ids[p],
                    logprobs=stored.logprobs[p],
                    logprob_origins=["generation"] * len(stored.texts[p]),
                    finish_reasons=stored.finish_reasons[p],
                    rewards=stored.rewards[p],
                    statuses=stored.statuses[p],
                )


def build_library(
    run_dirs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    append: bool = False,
) -> Path:
    """Read every group of every run in `run_dirs` (digests checked) into the library
    `out` (a new one, or a new part of it with `append`); returns the part written."""
    groups = [group for run_dir in run_dirs for group in run_groups(run_dir, data_dir)]
    return write_library(groups, out, append)
