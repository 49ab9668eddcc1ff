"""Small run configs shared by test folders (a module of its own: conftest files can't be
imported by name reliably when several test folders each have one; tests/ is on sys.path
because its conftest lives there)."""

from __future__ import annotations

from pathlib import Path

from algorithms.run_config import config_from_dict


def small_config(
    run_dir: Path, algorithm: str, agents=("tiny-a", "tiny-b"), agent_options=None, **extra
):
    """A few-second run: 6 prompts x 4 samples, short responses, no progress bar;
    `agent_options` go to every agent (e.g. `{"rollout_backend": "vllm"}`)."""
    data = {
        "agents": [{"name": a, "model": a, "options": dict(agent_options or {})} for a in agents],
        "algorithm": algorithm,
        "algorithm_options": {"n": 4, "num_minibatches": 2, **extra.pop("options", {})},
        "env": {
            "dataset": "procedural",
            "split": "train",
            # Level 1: the difficulty the tiny pair is warm-started on (its report's regime).
            "dataset_options": {"size": 40, "difficulty": 1},
            "batch_size": 6,
        },
        "sampling": {"max_new_tokens": 64},
        "steps": 2,
        "run_dir": str(run_dir),
        "checkpoint_every": 1,
        "progress": False,
        "tensorboard": False,
        **extra,
    }
    return config_from_dict(data)


# a grid to plan (one-step GRPO and GRAFT cells of the tiny pair), for tests of the grid's
# cells, hashes and scheduling
PLANNED_GRID = {
    "base": {
        "agents": [{"name": "tiny-a", "model": "tiny-a"}, {"name": "tiny-b", "model": "tiny-b"}],
        "steps": 1,
    },
    "algorithms": [{"name": "grpo", "label": "GRPO"}, {"name": "graft", "label": "GRAFT"}],
    "pairs": [["tiny-a", "tiny-b"]],
    "seeds": [0],
    "include_base": False,
    "eval": {"sets": ["procedural/addition"], "limit": 2, "k": 1},
}
