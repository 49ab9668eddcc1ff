"""The run config shared by the benchmarks that drive the training loop.

A benchmark run is short, trains on the procedural task, checkpoints once at the
end and shows no progress bar or TensorBoard, so what it times is the loop itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from algorithms.run_config import TrainConfig, config_from_dict


def procedural_run(
    agents: list[dict[str, Any]],
    algorithm: str,
    run_dir: Path,
    *,
    steps: int,
    batch_size: int,
    n: int,
    max_new_tokens: int,
    dataset_options: dict[str, Any],
    **extra: Any,
) -> TrainConfig:
    """`steps` steps of `algorithm` for `agents` (run-config agent entries) on procedural
    prompts drawn with `dataset_options`; `extra` sets further run-config fields."""
    return config_from_dict(
        {
            "agents": agents,
            "algorithm": algorithm,
            "algorithm_options": {"n": n, "num_minibatches": 2},
            "env": {
                "dataset": "procedural",
                "dataset_options": dataset_options,
                "batch_size": batch_size,
            },
            "sampling": {"max_new_tokens": max_new_tokens},
            "steps": steps,
            "run_dir": str(run_dir),
            "checkpoint_every": steps,
            "progress": False,
            "tensorboard": False,
            **extra,
        }
    )
