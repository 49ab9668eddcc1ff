"""The peer-control report (benchmarks.study.controls_report) on synthetic cells of its two real
grids: a planted effect is recovered with its per-seed values, a planted null is not, Holm and
the verdicts follow section 5, the doses are read both ways, the twin's counts and S4 come from
the metrics logs, and the pre-registration check compares commit and start times."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.compare.cells import plan_cells
from benchmarks.compare.grid import load_grid
from benchmarks.study.controls.design import BUILDS, GRAFT, GRPO, SHUFFLED, TWIN
from benchmarks.study.controls.timing import registration_check
from benchmarks.study.controls_report import main
from benchmarks.study.multiplicity import t_test
from benchmarks.study.stats import t975
from graft_env.policies.tiny.config import cache_key, pair_of

REPO = Path(__file__).resolve().parents[2]
K, P = 4, 6
POINT = 100 / (K * P)  # one correct sample on one problem, in points
GAP_SET = {"gap-d30-a": "procedural/subtraction", "gap-d30-b": "procedural/addition"}
FAMILY = {"gap-d30-a": "borrow", "gap-d30-b": "carry"}
BASE = [1, 1, 0, 0, 1, 0]
GAIN = {GRPO: 0, GRAFT: 1, TWIN: 1, SHUFFLED: 0, "base": 0}  # extra correct, every problem
NOISE = {GRAFT: [0, 1, 2, 1], TWIN: [1, 0, 1, 2]}  # extra on problem 0, by seed % 4
STARTED = "2100-01-01T00:00:00+00:00"


def counts(label: str, seed: int | None) -> list[int]:
    found = [c + GAIN[label] for c in BASE]
    found[0] += NOISE.get(label, [0] * 4)[(seed or 0) % 4]
    return found


def model_result(label: str, model: str, seed: int | None) -> dict:
    benchmarks = {}
    for name in GAP_SET.values():
        found = counts(label, seed) if name == GAP_SET[model] else [3] * P
        benchmarks[name] = {
            "pass@1": sum(found) / (K * P),
            "k": K,
            "problem_ids": [f"{name}/test/{i}" for i in range(P)],
            "successes": [found],
        }
    return {"model": model, "eval": {"benchmarks": benchmarks, "average": {"pass@1": 0.5}}}


def metrics_rows(cell) -> list[dict]:
    rows = []
    for step in range(3):
        for agent in cell.agents:
            peer = next(a for a in GAP_SET if a != agent)
            row = {"step": step, "agent": agent, f"exchange/{peer}->{agent}/prompts": 2.0}
            if cell.label == TWIN:
                row[f"exchange/{peer}->{agent}/prompts"] = 0.0
                prefix = f"exchange/{agent}~twin->{agent}/graft-twin"
                row |= {f"{prefix}/gated_prompts": 2.0, f"{prefix}/filled_prompts": 1.0}
                row[f"{prefix}/resampled_responses"] = 24.0
            rows.append(row)
    return rows


def write_cells(out: Path) -> int:
    written = 0
    for build in BUILDS:
        for cell in plan_cells(load_grid(REPO / build.grid), out / build.name):
            cell.directory.mkdir(parents=True, exist_ok=True)
            result = {
                "cell": cell.cell_id,
                "config_hash": cell.config_hash,
                "label": cell.label,
                "pair": list(cell.pair.agents),
                "seed": cell.seed,
                "provenance": {"started_at": STARTED},
                "timings": {"cell_seconds": 60.0},
                "models": {a: model_result(cell.label, a, cell.seed) for a in cell.agents},
            }
            (cell.directory / "result.json").write_text(json.dumps(result))
            if cell.label in (GRAFT, TWIN, SHUFFLED):
                (cell.directory / "run").mkdir()
                text = "".join(json.dumps(row) + "\n" for row in metrics_rows(cell))
                (cell.directory / "run" / "metrics.jsonl").write_text(text)
            written += 1
    return written


def fake_build(cache: Path, seed: int) -> None:
    """gap-d30 as built with `seed`: weights, build.json and a report.json with its doses."""
    root = cache / f"gap-d30-{cache_key(pair_of('gap-d30-a'), seed)}"
    weights = f"weights of build {seed}".encode()
    for member in GAP_SET:
        (root / member).mkdir(parents=True)
        (root / member / "model.safetensors").write_bytes(weights)
    digest = hashlib.sha256(weights).hexdigest()
    build = {"seed": seed, "threads": 1, "weights_sha256": dict.fromkeys(GAP_SET, digest)}
    (root / "build.json").write_text(json.dumps(build))
    skills = {
        m: {"skills": {FAMILY[m]: {"pass_at_1": 0.3 + seed / 100, "all_fail": 0.2}}}
        for m in GAP_SET
    }
    report = {"models": skills, "prompts_per_skill": {"borrow": 48, "carry": 48}}
    (root / "report.json").write_text(json.dumps(report))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    base = tmp_path_factory.mktemp("controls")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRAFT_CACHE_DIR", str(base / "cache"))
        for build in BUILDS:
            fake_build(base / "cache", build.build_seed)
        written = write_cells(base / "runs")
        target = base / "report"
        assert main(["--out", str(base / "runs"), "--report-dir", str(target)]) == 0
    results = json.loads((target / "results.json").read_text())
    return {"results": results, "md": (target / "report.md").read_text(), "written": written}


def entry(report, name: str, scope: str = "pooled", build: str | None = None) -> dict:
    contrasts = report["results"]["contrasts"]
    rows = contrasts["pooled_builds"] if build is None else contrasts["per_build"][build]
    return next(e for e in rows if e["contrast"] == name and e["scope"] == scope)


def expected_c1(seed: int) -> float:
    return (P + NOISE[GRAFT][seed % 4]) * POINT


def test_every_cell_is_read(report):
    assert report["written"] == 124
    assert report["results"]["cells"] | {"stale_cells": []} == {
        "planned": 124,
        "finished": 124,
        "stale": 0,
        "missing": 0,
        "stale_cells": [],
    }


def test_a_planted_effect_is_recovered_with_every_per_seed_value(report):
    c1 = entry(report, "C1")
    assert c1["seeds"] == list(range(10, 34))
    for seed in range(10, 34):
        value = c1["per_seed"][str(seed)]
        assert value["value"] == pytest.approx(expected_c1(seed))
        assert value["build"] == ("build0" if seed < 22 else "build1")
    values = [expected_c1(s) for s in range(10, 34)]
    half = t975(23) * np.std(values, ddof=1) / np.sqrt(24)
    assert c1["mean"] == pytest.approx(np.mean(values))
    assert c1["t_interval"]["low"] == pytest.approx(np.mean(values) - half)
    assert c1["p"] == pytest.approx(t_test(values)[1])
    assert c1["verdict"] == "supported" and c1["direction"] == "above 0"
    assert c1["bootstrap"]["low"] > 0


def test_a_planted_null_is_not_shown_and_holm_adjusts_the_three(report):
    c2, c3 = entry(report, "C2"), entry(report, "C3")
    assert c2["mean"] == pytest.approx(0.0)
    assert c2["p"] == pytest.approx(1.0) and c2["verdict"] == "not resolvable here"
    assert c3["verdict"] == "supported"
    ps = sorted(entry(report, c)["p"] for c in ("C1", "C2", "C3"))
    adjusted = sorted(entry(report, c)["p_holm"] for c in ("C1", "C2", "C3"))
    assert adjusted[0] == pytest.approx(min(1, 3 * ps[0]))
    assert adjusted[2] == pytest.approx(max(adjusted[1], ps[2]))
    assert "p_holm" not in entry(report, "S1") and "p_holm" not in entry(report, "C1", "a")


def test_per_build_and_per_model_rows(report):
    for build, seeds in (("build0", range(10, 22)), ("build1", range(22, 34))):
        found = entry(report, "C1", build=build)
        assert found["seeds"] == list(seeds)
        assert found["mean"] == pytest.approx(np.mean([expected_c1(s) for s in seeds]))
    assert entry(report, "C1", "a")["mean"] == pytest.approx(entry(report, "C1")["mean"])
    difference = report["results"]["contrasts"]["build_difference"]
    c1 = next(row for row in difference if row["contrast"] == "C1")
    assert c1["difference"] == pytest.approx(
        np.mean([expected_c1(s) for s in range(10, 22)])
        - np.mean([expected_c1(s) for s in range(22, 34)])
    )


def test_doses_both_ways_and_the_moved_groups(report):
    doses = report["results"]["doses"]
    assert doses["build1"]["members"]["gap-d30-a"]["report_pass_at_1"] == pytest.approx(31.0)
    assert doses["build0"]["members"]["gap-d30-b"]["base_eval_pass_at_1"] == pytest.approx(
        sum(BASE) * POINT
    )
    assert doses["build0"]["provenance"]["cache_key"] != doses["build1"]["provenance"]["cache_key"]
    moved = report["results"]["moved"]
    assert moved["summary"][GRAFT]["moved"] == 2.0 and moved["summary"][TWIN]["gated"] == 2.0
    assert moved["twin_matched_share"] == pytest.approx(0.5)
    s4 = report["results"]["s4"]
    seed = 13  # (GRAFT - GRPO) / 2 - (twin - GRPO) / 1, both models alike
    twin_gain = (P + NOISE[TWIN][seed % 4]) * POINT
    assert s4["per_seed"][str(seed)]["value"] == pytest.approx(expected_c1(seed) / 2 - twin_gain)


def test_the_report_states_the_check_and_every_seed(report):
    check = report["results"]["registration"]
    assert check["verdict"] == "pre-registered" and check["first_cell_started_at"] == STARTED
    assert "**pre-registered**" in report["md"]
    assert all(f"| {seed} | build" in report["md"] for seed in range(10, 34))


def test_registration_check_lists_cells_started_before_the_design_commit():
    commit = {"commit": "abc", "committed_at": "2026-12-04T20:00:00+00:00"}
    starts = {"x": "2026-12-04T19:59:59+00:00", "y": "2026-12-04T20:30:00+00:00"}
    found = registration_check(commit, starts)
    assert found["verdict"] == "violated" and found["started_earlier"] == ["x"]
    later = registration_check(commit, {"y": starts["y"]})
    assert later["verdict"] == "pre-registered" and later["first_cell"] == "y"
    assert registration_check(None, starts)["verdict"] == "unknown"
    assert registration_check(commit, {})["verdict"] == "no cells"
