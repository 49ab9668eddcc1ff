"""`benchmarks.perf.trl_graft_step` at its smallest size: the GRAFT side's two generation
batches, one timed, the peer's records read from the channel (a plain side is TRL's
`GRPOTrainer` itself)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from benchmarks.perf.trl_graft_step import peer_rollouts, publish_peer, run_side


def test_the_step_benchmark_runs_at_its_smallest_size(tmp_path):
    publish_peer(tmp_path / "channel", peer_rollouts(), steps=2)
    timed = run_side("graft", tmp_path, steps=2, tokens=8)
    assert len(timed) == 1 and timed[0] > 0
