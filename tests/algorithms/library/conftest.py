"""Two GRPO runs of the peer (tiny-a) on one small prompt set, with different seeds and so
different data orders: the sources of the libraries these tests build (~6 s, once)."""

from __future__ import annotations

from pathlib import Path

import pytest
from library_runs import run_config

from algorithms.training.loop import Trainer

PEER_SEEDS = (1, 2)


@pytest.fixture(scope="session")
def peer_runs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("peers")
    runs = [root / f"peer-seed{seed}" for seed in PEER_SEEDS]
    for seed, run in zip(PEER_SEEDS, runs, strict=True):
        Trainer(run_config(run, "grpo", "tiny-a", seed, steps=3)).train()
    return runs
