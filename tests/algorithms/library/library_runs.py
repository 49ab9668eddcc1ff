"""The small prompt set and run configs of the library tests (a module of its own: conftest
files can't be imported by name reliably, see tests/run_configs.py)."""

from __future__ import annotations

from pathlib import Path

from run_configs import small_config

# 24 problems (4 per skill): two 3-step runs' 36 groups cover most of them, some twice.
ENV = {
    "dataset": "procedural",
    "split": "train",
    "dataset_options": {"size": 4, "difficulty": 1},
    "batch_size": 6,
}


def run_config(run_dir: Path, algorithm: str, agent: str, seed: int, steps: int, **extra):
    """A `small_config` on `ENV` with one agent."""
    return small_config(
        run_dir, algorithm, agents=(agent,), steps=steps, seed=seed, env=ENV, **extra
    )
