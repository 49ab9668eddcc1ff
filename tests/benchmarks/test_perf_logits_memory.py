"""Smoke test of benchmarks/perf/logits_memory.py at its smallest size."""

from __future__ import annotations

import math

from benchmarks.perf.logits_memory import main


def test_logits_memory_measures_both_parts_both_ways():
    rows = main(["--sizes", "8", "--vocab", "512", "--chunk", "4"])
    assert [(row["R"], row["part"]) for row in rows] == [(8, "update"), (8, "scoring")]
    for row in rows:
        assert math.isfinite(row["one_pass_mib"]) and math.isfinite(row["chunked_mib"])
