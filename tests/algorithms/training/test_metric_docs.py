"""The logged-metrics page (`algorithms.training.metric_docs`) against real runs: short runs of
every kind of row (GRAFT with periodic evaluation and rollout correction, HACPO, dynamic
sampling with a KL term, the two peer controls, a stored peer, a library) log only documented
names, and every documented name is logged by one of them or, where only some steps' data
produce it, by the code that writes it."""

from __future__ import annotations

import numpy as np
import pytest
from run_configs import small_config

from algorithms.exchange.stats import ExchangeStats
from algorithms.library.build import build_library
from algorithms.library.staleness import staleness_metrics
from algorithms.training.loop import Trainer
from algorithms.training.metric_docs import METRICS, documented_name, metrics_page
from algorithms.training.step import update_policies
from graft_env.types import TrainBatch

EVAL = {"every": 1, "datasets": ["procedural/addition"], "k": 1, "limit": 2, "max_new_tokens": 16}
RUNS = {  # run name -> (entry, small_config arguments); "peer" is the stored / library source
    "graft": ("graft", {"eval": EVAL, "rollout_correction": {"mode": "monitor"}}),
    "hacpo": ("hacpo", {}),
    "dynamic": ("grpo-dynamic", {"agents": ("tiny-a",), "options": {"kl_coef": 0.01}}),
    "twin": ("graft", {"options": {"exchange": "graft-twin"}}),
    "shuffled": ("graft", {"options": {"exchange": "graft-shuffled"}}),
    "peer": ("grpo", {"agents": ("tiny-b",)}),
    "stored": ("graft-stored", {"agents": ("tiny-a",)}),
    "library": ("graft-library", {"agents": ("tiny-a",)}),
}


@pytest.fixture(scope="module")
def logged(tiny_pair_paths, tmp_path_factory) -> set[str]:
    """Every name the runs' rows hold (one step each, a few seconds in all)."""
    root = tmp_path_factory.mktemp("metric-docs")
    extra = {
        "stored": {"stored_peer": {"run_dir": str(root / "peer"), "agent": "tiny-b"}},
        "library": {"library": {"path": str(root / "library")}},
    }
    names: set[str] = set()
    for run, (entry, options) in RUNS.items():
        if run == "library":
            build_library([root / "peer"], root / "library")
        config = small_config(root / run, entry, steps=1, **options, **extra.get(run, {}))
        names |= {name for row in Trainer(config).train() for name in row}
    return names


def written_only_with_data() -> set[str]:
    """Names a step logs only when its data has them, from the code that writes them: a
    transfer with scores, a shuffle that moved a reward, a used library group (its age
    buckets), an agent with nothing to train on."""
    stats = ExchangeStats("graft-shuffled")
    stats.direction("a", "b").record(np.array([0.5, 0.2]), np.array([1.0, 0.0]), 0)
    stats.count("rewards_moved", 1.0, "a", "b")
    names = set(stats.summary())
    names |= set(staleness_metrics(7200.0, [3], [0.0], [np.array([1.0, 0.0])]))
    empty = TrainBatch(agent="a", prompts=[], sequences=[], minibatches=[])
    names |= set(update_policies({"a": None}, {"a": empty}, loss=None, step=0)["a"])
    return names


def test_every_logged_metric_is_documented(logged):
    assert len(logged) > 60
    assert not sorted(name for name in logged if documented_name(name) is None)


def test_every_documented_metric_is_logged(logged):
    written = logged | written_only_with_data()
    assert not sorted(set(METRICS) - {documented_name(name) for name in written})


def test_the_page_lists_every_entry_once():
    page = metrics_page()
    for name in METRICS:
        assert page.count(f"| `{name}` |") == 1, name


@pytest.mark.parametrize(
    ("logged_name", "entry"),
    [
        ("exchange/tiny-a->tiny-b/prompts", "exchange/<source>-><receiver>/prompts"),
        (
            "exchange/tiny-b~twin->tiny-b/graft-twin/rounds",
            "exchange/<source>-><receiver>/graft-twin/rounds",
        ),
        ("eval/procedural/addition/pass@1", "eval/<set>/pass@1"),
        ("eval/math500/pass@k", "eval/<set>/pass@k"),
        ("eval/average/pass@1", "eval/average/pass@1"),
        ("exchange/s/p90", "exchange/s/<stat>"),
        ("library/age_hours_1to24/admitted", "library/age_hours_<bucket>/admitted"),
        ("hacpo/capability/tiny-a", "hacpo/capability/<agent>"),
        ("exchange/s/median", None),
        ("reward_mean/extra", None),
    ],
)
def test_a_logged_name_maps_to_its_entry(logged_name, entry):
    assert documented_name(logged_name) == entry
