"""The worked example in CONTRIBUTING.md runs as written and does what it says."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import algorithms
from algorithms.exchange import available_strategies
from algorithms.testing import N, TextScorer, make_rollouts

CONTRIBUTING = Path(__file__).resolve().parents[2] / "CONTRIBUTING.md"


def example_code() -> str:
    """The single ```python block of the 'Adding an exchange strategy' section."""
    text = CONTRIBUTING.read_text(encoding="utf-8")
    section = text.split("## Adding an exchange strategy", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, f"expected one python block in the section, found {len(blocks)}"
    return blocks[0]


@pytest.fixture(scope="module")
def majority_registered() -> str:
    if "majority" not in available_strategies():
        exec(compile(example_code(), f"{CONTRIBUTING}:majority", "exec"), {})
    return "majority"


def test_the_example_strategy_transfers_only_majority_groups(majority_registered) -> None:
    algo = algorithms.make("graft", n=N, exchange=majority_registered)
    # A failed prompts 0-3. B: 3/4 on 0 (majority), 1/4 on 1, 4/4 on 2 (no variance), 2/4 on 3.
    rollouts = {"A": make_rollouts("A", [0, 0, 0, 0, 1]), "B": make_rollouts("B", [3, 1, 4, 2, 0])}
    algo.compute_advantages(rollouts)
    exchanged = algo.exchange(rollouts, ["A", "B"], TextScorer(), np.random.default_rng(0))
    transfers = exchanged.transfers
    assert [(g.source, g.prompt_index) for g in transfers["A"]] == [("B", 0)]
    assert transfers["B"] == []  # A's only success (prompt 4, 1/4) is not a majority
    group = transfers["A"][0]
    np.testing.assert_array_equal(group.advantages, rollouts["B"].advantages[0])
    np.testing.assert_array_equal(group.weights, np.ones(N))
    stats = exchanged.stats.directions[("B", "A")]
    assert (stats.candidates, stats.selected_prompts, stats.admitted) == (4, [0], N)

    batch = algo.build_batches(rollouts, transfers, ["A"], np.random.default_rng(0))[0]["A"]
    assert {s.prompt_index for s in batch.sequences if s.is_peer} == {0}
    assert 0 not in {s.prompt_index for s in batch.sequences if not s.is_peer}
