"""Small run configs shared by test folders (a module of its own: conftest files can't be
imported by name reliably when several test folders each have one; tests/ is on sys.path
because its conftest lives there)."""

from __future__ import annotations

from pathlib import Path

from algorithms.training.run_config import config_from_dict


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


# a two-seed grid of the tiny pair with a stored entry, for planning and hash tests
TWO_SEED_BASE = {
    "agents": [
        {"name": "tiny-a", "model": "tiny-a", "options": {"lr": 1e-4}},
        {"name": "tiny-b", "model": "tiny-b", "options": {"lr": 1e-4}},
    ],
    "algorithm_options": {"n": 4},
    "env": {"dataset": "procedural", "dataset_options": {"size": 20, "difficulty": 1}},
    "steps": 2,
}
TWO_SEED_GRID = {
    "base": TWO_SEED_BASE,
    "algorithms": [
        {"name": "grpo", "label": "GRPO n=4"},
        {"name": "graft", "label": "GRAFT"},
        {"name": "graft-stored", "label": "stored", "stored_peer_from": "GRPO n=4"},
    ],
    "pairs": [{"models": ["tiny-a", "tiny-b"], "options": {"tiny-b": {"lr": 3e-4}}}],
    "seeds": [0, 1],
    "eval": {"sets": ["procedural/addition", "math500"], "limit": 4, "k": 2},
}


# the smallest real grid: 1 step of 3 prompts x 2 samples, 2 problems x 2 samples evaluated
SMALLEST_GRID = {
    "base": {
        "agents": [{"name": "tiny-a", "model": "tiny-a", "options": {"lr": 1e-4}}],
        "algorithm_options": {"n": 2, "num_minibatches": 1},
        "env": {"dataset": "procedural", "dataset_options": {"size": 12, "difficulty": 1}},
        "sampling": {"max_new_tokens": 16},
        "steps": 1,
        "progress": False,
        "tensorboard": False,
    },
    "train": {"env": {"batch_size": 3}},
    "algorithms": [{"name": "grpo", "label": "GRPO n=2"}, {"name": "graft", "label": "GRAFT"}],
    "pairs": [["tiny-a", "tiny-b"]],
    "seeds": [0],
    "include_base": False,
    "eval": {
        "sets": ["procedural/addition"],
        "procedural": {"difficulty": 1},
        "limit": 2,
        "k": 2,
        "max_new_tokens": 16,
    },
    "threads": 1,
}
