"""The stored-peer report (benchmarks.study.stored_report) on synthetic cells of its two real
grids: planted gains are recovered per seed, Holm runs over the two primary contrasts only,
the non-inferiority contrast is judged against its margin, and the transfers, library lookups
and s / w distributions come from the metrics logs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from benchmarks.compare.cells import plan_cells
from benchmarks.compare.grid import load_grid
from benchmarks.study.library_report import LOOKUP
from benchmarks.study.stored_report import BUILDS, GRPO, LIBRARY, LIVE, STORED, main
from graft_env.policies.tiny.config import cache_key, pair_of

REPO = Path(__file__).resolve().parents[2]
K, P = 4, 6
POINT = 100 / (K * P)  # one correct sample on one problem, in points
GAP_SET = {"gap-d30-a": "procedural/subtraction", "gap-d30-b": "procedural/addition"}
BASE = [1, 1, 0, 0, 1, 0]
GAIN = {GRPO: 0, LIVE: 1, STORED: 1, LIBRARY: 0, "base": 0}  # extra correct, every problem
NOISE = {LIVE: [0, 1, 2, 1], STORED: [1, 2, 3, 3]}  # extra on problem 0, by seed % 4
STARTED = "2100-01-01T00:00:00+00:00"
STEPS = 150


def model_result(label: str, model: str, seed: int | None) -> dict:
    found = [c + GAIN[label] for c in BASE]
    found[0] += NOISE.get(label, [0] * 4)[(seed or 0) % 4]
    benchmarks = {}
    for name in GAP_SET.values():
        successes = found if name == GAP_SET[model] else [3] * P
        benchmarks[name] = {
            "pass@1": sum(successes) / (K * P),
            "k": K,
            "problem_ids": [f"{name}/test/{i}" for i in range(P)],
            "successes": [successes],
        }
    return {"model": model, "eval": {"benchmarks": benchmarks, "average": {"pass@1": 0.5}}}


def metrics_rows(label: str, agents) -> list[dict]:
    """Three steps per receiver: one prompt of 8 responses moved a step, s = w = 0.9 (0.5 from
    the library), and the library's lookup counts."""
    rows = []
    for step in range(3):
        for agent in agents:
            source = "library" if label == LIBRARY else next(a for a in GAP_SET if a != agent)
            prefix = f"exchange/{source}->{agent}"
            value = 0.5 if label == LIBRARY else 0.9
            row = {"step": step, "agent": agent, f"{prefix}/prompts": 1.0}
            row |= {f"{prefix}/candidates": 2.0, f"{prefix}/transferred": 8.0}
            row |= {f"{prefix}/admitted": 8.0}
            for name in ("s", "w"):
                row |= {f"exchange/{name}/count": 8.0, f"exchange/{name}/mean": value}
                row |= {f"exchange/{name}/{q}": value for q in ("p10", "p50", "p90")}
            if label == LIBRARY:
                row |= {f"library/{name}": 1.0 for name in LOOKUP}
            rows.append(row)
    return rows


def fake_build(cache: Path, seed: int) -> None:
    """gap-d30 as built with `seed` in `cache` (read where a grid names no committed build)."""
    root = cache / f"gap-d30-{cache_key(pair_of('gap-d30-a'), seed)}"
    weights = f"weights of build {seed}".encode()
    for member in GAP_SET:
        (root / member).mkdir(parents=True)
        (root / member / "model.safetensors").write_bytes(weights)
    digest = hashlib.sha256(weights).hexdigest()
    build = {"seed": seed, "threads": 1, "weights_sha256": dict.fromkeys(GAP_SET, digest)}
    (root / "build.json").write_text(json.dumps(build))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    base = tmp_path_factory.mktemp("stored")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRAFT_CACHE_DIR", str(base / "cache"))
        patch.chdir(REPO)  # where the grids name their builds from
        for build in BUILDS:
            fake_build(base / "cache", build.build_seed)
        for build in BUILDS:
            for cell in plan_cells(load_grid(REPO / build.grid), base / "runs" / build.name):
                cell.directory.mkdir(parents=True, exist_ok=True)
                result = {
                    "cell": cell.cell_id,
                    "config_hash": cell.config_hash,
                    "label": cell.label,
                    "pair": list(cell.pair.agents),
                    "seed": cell.seed,
                    "config": None if cell.config is None else {"steps": STEPS},
                    "provenance": {"started_at": STARTED},
                    "timings": {"cell_seconds": 60.0},
                    "models": {a: model_result(cell.label, a, cell.seed) for a in cell.agents},
                }
                (cell.directory / "result.json").write_text(json.dumps(result))
                if cell.label in (LIVE, STORED, LIBRARY):
                    (cell.directory / "run").mkdir()
                    rows = metrics_rows(cell.label, cell.agents)
                    text = "".join(json.dumps(row) + "\n" for row in rows)
                    (cell.directory / "run" / "metrics.jsonl").write_text(text)
        target = base / "report"
        assert main(["--out", str(base / "runs"), "--report-dir", str(target)]) == 0
    return json.loads((target / "results.json").read_text()), (target / "report.md").read_text()


def entry(results, name: str) -> dict:
    rows = results["contrasts"]["pooled_builds"]
    return next(e for e in rows if e["contrast"] == name and e["scope"] == "pooled")


def test_planted_gains_holm_over_the_primaries_and_the_margin(report):
    results, markdown = report
    assert results["cells"] == {
        "planned": 172,
        "finished": 172,
        "stale": 0,
        "missing": 0,
        "stale_cells": [],
    }
    p1, p2, n1 = entry(results, "P1"), entry(results, "P2"), entry(results, "N1")
    assert len(p1["seeds"]) == 24 and {v["build"] for v in p1["per_seed"].values()} == {
        "build2",
        "build3",
    }
    for seed, found in p1["per_seed"].items():  # one extra correct on every problem, + noise
        # pooled: the mean of both models' equal gains; sums of a few multiples of POINT
        assert found["value"] == pytest.approx((P + NOISE[STORED][int(seed) % 4]) * POINT)
    assert p1["verdict"] == "supported" and "verdict" not in n1
    assert p2["mean"] == pytest.approx(0.0) and p2["verdict"] != "supported"
    assert "p_holm" in p1 and "p_holm" in p2 and "p_holm" not in n1
    # stored - live: 1 or 2 more correct samples on problem 0 in every seed, so above -1
    assert n1["margin"] == 1.0 and n1["margin_verdicts"]["t"] == "supported"
    assert "N1 non-inferiority at −1 point" in markdown


def test_transfers_lookups_and_informativeness_from_the_logs(report):
    results, markdown = report
    for label in (LIVE, STORED, LIBRARY):
        for direction, found in results["transfers"][label].items():
            # each of 3 logged steps moved 1 prompt; totals over steps / the run's 150 steps
            assert found["per_step"]["prompts"] == pytest.approx(3 / STEPS), direction
    assert set(results["transfers"][LIBRARY]) == {"library->gap-d30-a", "library->gap-d30-b"}
    assert results["lookup"]["gap-d30-a"]["per_step"]["used_groups"] == pytest.approx(1.0)
    assert results["informativeness"][LIBRARY]["gap-d30-a"]["w"]["mean"] == pytest.approx(0.5)
    assert results["informativeness"][STORED]["gap-d30-b"]["s"]["p50"] == pytest.approx(0.9)
    assert results["kept"]["shares"]["library"] == pytest.approx(0.0)
    assert "## Transfers per step" in markdown
