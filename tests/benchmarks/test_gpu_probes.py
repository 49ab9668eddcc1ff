"""Smoke test of `benchmarks.perf.gpu_probes` on CPU (one thread, toy sizes, a fresh process
per probe as on the GPU): (a) through CPU shared memory, (b) as the deterministic thread
model of the sync protocol, where acknowledging before synchronizing must corrupt every
bucket but the last and synchronizing first none, (d) and (e) tiny, the CUDA-only parts
reported as skipped."""

from __future__ import annotations

import json
import math

from benchmarks.perf import gpu_probes


def test_gpu_probes_smoke(tmp_path):
    out = tmp_path / "out"
    assert gpu_probes.main(["--smoke", "--threads", "1", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    probes = results["probes"]
    assert list(probes) == list(gpu_probes.PROBES)
    assert (out / "summary.txt").read_text().count("\n") == len(probes) + 2
    share = probes["a_ipc_share"]
    assert share["status"] == "ok" and share["expandable_on"] == gpu_probes.NO_CUDA
    assert share["expandable_off"]["bytes_equal"] and share["expandable_off"]["write_back_seen"]
    race = probes["b_ack_race"]
    assert race["ack_before_sync"]["corrupted_buckets"] == race["buckets"] - 1
    assert race["sync_then_ack"]["corrupted_buckets"] == 0
    assert probes["c_memory"]["status"] == gpu_probes.NO_CUDA
    draws = probes["d_sampling"]
    assert draws["per_request_repeats_when_reseeded"] and draws["draws_each"] >= 1
    rate = probes["e_rank_rate"]
    assert rate["status"] == "ok", rate["status"]
    for phase in ("update", "score"):
        assert rate[phase]["tokens"] > 0 and math.isfinite(rate[phase]["tokens_per_s"])
    assert rate["update"]["mfu"] is None  # no peak FLOP rate on CPU
