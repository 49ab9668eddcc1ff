"""Smoke test of `benchmarks.perf.gpu_probes` on CPU (one thread, toy sizes, a fresh process
per probe as on the GPU): (a) through CPU shared memory, (b) as the deterministic thread
model of the sync protocol, where acknowledging before synchronizing must corrupt every
bucket but the last and synchronizing first none, (d) and (e) tiny, the CUDA-only parts
reported as skipped; and (c)'s headline and its attention error, in this process."""

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


UPDATE = {"reserved_not_allocated_after_update_gib": 0.5, "returned_by_empty_cache_gib": 1.25}
ALLOCATOR = "reserved, not allocated after the update 0.50 GiB; empty_cache returned 1.25 GiB"


def test_c_memory_headline_on_cpu_compare():
    """(c)'s line formats `attention_memory.compare`'s records (on CPU here, where (c) itself is
    skipped): the plan equals sdpa's measured bytes and bounds eager's within 22 %, at L and N
    multiples of 8; at 47 / 94 it equals sdpa's (the CPU makes no alignment copy)."""
    from benchmarks.perf.attention_memory import compare

    headline = gpu_probes._headline("c_memory", {**UPDATE, "attention": compare("cpu")})
    attention = "attention plan / measured 1.00-1.22 (L, N not multiples of 8: 1.00-1.00)"
    assert headline == f"{ALLOCATOR}; {attention}"


def test_c_memory_reports_the_update_when_compare_fails(monkeypatch):
    from benchmarks.perf import attention_memory, gpu_probe_compute

    def fail(device):
        raise RuntimeError(f"no kernel on {device}")

    monkeypatch.setattr(gpu_probe_compute, "memory_around_update", lambda *_: dict(UPDATE))
    monkeypatch.setattr(attention_memory, "compare", fail)
    record = gpu_probes.run_probe("c_memory", "cpu", smoke=False, budget_s=75.0)
    assert record == {**UPDATE, "attention": {"error": "RuntimeError: no kernel on cpu"}}
    headline = gpu_probes._headline("c_memory", record)
    assert headline == f"{ALLOCATOR}; attention: RuntimeError: no kernel on cpu"
