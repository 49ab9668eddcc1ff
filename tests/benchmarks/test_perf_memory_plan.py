"""Smoke tests of the memory-plan benchmarks at their smallest sizes, on CPU, one thread."""

from __future__ import annotations

import json

from benchmarks.perf import memory_plan_check, scale_check


def test_memory_plan_check_one_case(tmp_path, capsys):
    out = tmp_path / "rows.json"
    argv = ["--responses", "16", "--architectures", "llama3.2", "--tolerance", "10"]
    memory_plan_check.main([*argv, "--json", str(out)])
    rows = json.loads(out.read_text())
    assert {row["phase"] for row in rows} == {"update", "score"}
    assert all(row["measured"]["total"] > 0 and row["plan"]["total"] > 0 for row in rows)
    assert "plan/meas" in capsys.readouterr().out


def test_scale_check_shrunk(tmp_path):
    assert scale_check.main(["--shrink", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["model"] for r in results] == list(scale_check.MODELS)
    assert all(r[phase]["tokens_per_s"] > 0 for r in results for phase in ("update", "score"))
