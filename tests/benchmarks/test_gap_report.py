"""The gap study's report on synthetic finished cells of the real gap grids.

Every cell is evaluated on six problems per set, k = 4. A model's gap set (gap-*-a:
subtraction, gap-*-b: addition) has its pair's base counts, plus a planted gain on every
problem (`GAIN`) and per-seed extra samples on problem 0 (`NOISE`); its strength set has 2 of
4 on every problem (GRPO n=32: 1 of 4). So every contrast's per-seed value is known by
construction (`expected`): one sample on one problem moves a score by 100 / 24 points. Left
out on purpose: every gap-d5 cell, GRPO n=32 at gap-d30, GRAFT w/o floor at gap-d0 seed 5;
one cell is stale (another hash). gap-d0 is "built" into a temporary cache (a build.json and
one weight file per member).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.compare.cells import plan_cells
from benchmarks.compare.grid import load_grid
from benchmarks.study.gap.cells import GapModel, Study, gap_models
from benchmarks.study.gap.contrasts import GAP_MODEL, NOT_RESOLVABLE, _bootstrap_inputs
from benchmarks.study.gap.slope import slope_entry
from benchmarks.study.gap_report import GRIDS, main
from benchmarks.study.report import GRAFT, GRPO8, GRPO32, NO_COMPAT, NO_FLOOR
from benchmarks.study.stats import (
    contrast_replicates,
    detectable_effect,
    paired_contrast,
    t80,
    t975,
    t_interval,
)
from graft_env.policies.tiny.config import cache_key, pair_of

REPO = Path(__file__).resolve().parents[2]
K, P = 4, 6
POINT = 100 / (K * P)  # one correct sample on one problem, in points
GAP_SET = {"a": "procedural/subtraction", "b": "procedural/addition"}
BASE = {
    "gap-d0": [0] * P,
    "gap-d15": [1, 1, 0, 0, 1, 0],
    "gap-d30": [2, 1, 1, 2, 1, 1],
    "gap-strong": [0] * P,
    "gap-weak": [0] * P,
}
GAIN = {(NO_COMPAT, "gap-d0"): 2, (NO_COMPAT, "gap-d15"): 1, (GRPO32, "gap-d0"): 2}
GAIN[(NO_COMPAT, "gap-weak")] = 1  # a failed null
NOISE = {  # (label, pair, role) -> per seed, extra correct samples on problem 0
    (NO_FLOOR, "gap-d0", "a"): [1, 2, 3, 1, 2, 3],
    (GRAFT, "gap-d0", "b"): [1, 0, 1, 0, 1, 0],
    (GRPO8, "gap-d0", "b"): [0, 1, 0, 1, 0, 1],
    (NO_COMPAT, "gap-strong", "a"): [1, 0, 1, 0, 1, 0],
    (GRPO8, "gap-strong", "a"): [0, 1, 0, 1, 0, 1],
}
CANDIDATES = {"gap-d0": 6.0, "gap-d15": 4.0, "gap-d30": 2.0, "gap-strong": 1.0, "gap-weak": 0.0}
ARMS = (GRAFT, NO_FLOOR, NO_COMPAT)
STALE = "grpo-n-8/gap-weak-b/seed3"
WEIGHTS = b"not really safetensors"


def split(model: str) -> tuple[str, str]:
    return model[:-2], model[-1]  # gap-d0-a -> (gap-d0, a)


def gap_counts(label: str, model: str, seed: int | None) -> list[int]:
    pair, role = split(model)
    counts = [c + GAIN.get((label, pair), 0) for c in BASE[pair]]
    counts[0] += NOISE.get((label, pair, role), [0] * 6)[seed or 0]
    assert all(0 <= c <= K for c in counts)
    return counts


def expected(label: str, model: str, seed: int | None) -> float:
    return sum(gap_counts(label, model, seed)) * POINT


def skipped(cell) -> bool:
    model = next(iter(cell.models))
    return (
        split(model)[0] == "gap-d5"
        or (cell.label == GRPO32 and model.startswith("gap-d30"))
        or (cell.label == NO_FLOOR and model.startswith("gap-d0-") and cell.seed == 5)
    )


def model_result(label: str, model: str, seed: int | None) -> dict:
    role = split(model)[1]
    benchmarks = {}
    for name in GAP_SET.values():
        strength = [1 if label == GRPO32 else 2] * P  # GRPO n=32 forgets some of it
        counts = gap_counts(label, model, seed) if name == GAP_SET[role] else strength
        benchmarks[name] = {
            "pass@1": sum(counts) / (K * P),
            "k": K,
            "problem_ids": [f"{name}/test/{i}" for i in range(P)],
            "successes": [counts],
        }
    n = 32 if label == GRPO32 else 8
    trained = label != "base"
    return {
        "model": model,
        "eval": {"benchmarks": benchmarks, "average": {"pass@1": 0.5}},
        "rollouts_to_checkpoint": 150 * 16 * n if trained else None,
        "checkpoint_steps": 150 if trained else None,
    }


def metrics_rows(cell) -> list[dict]:
    rows = []
    for step in range(4):
        for agent in cell.agents:
            pair, role = split(agent)
            row = {"step": step, "agent": agent, "reward_mean": 0.1}
            if cell.label in ARMS:
                source = f"{pair}-{'b' if role == 'a' else 'a'}"
                prefix = f"exchange/{source}->{agent}"
                gate = CANDIDATES[pair] + (role == "b")  # b's direction: one more
                row |= {f"{prefix}/gate_candidates": gate, f"{prefix}/candidates": gate}
                row |= {f"{prefix}/prompts": 2, f"{prefix}/transferred": 8}
                row |= {f"{prefix}/admitted": 4, "loss_fn/peer_tokens": 10}
                row |= {"clipped_share_peer": 0.01, "exchange/s/count": 8}
                row |= {"exchange/s/mean": 0.5, "exchange/s/p10": 0.4, "exchange/s/p90": 0.6}
            if step % 2:
                gap = GAP_SET[role]
                row |= {f"eval/{gap}/pass@1": 0.25 * step, "eval/average/pass@1": 0.5}
                other = next(s for s in GAP_SET.values() if s != gap)
                row[f"eval/{other}/pass@1"] = 0.5
            rows.append(row)
    return rows


def write_cells(out: Path) -> set[str]:
    """Every planned cell of the three grids but the skipped ones; returns the cell ids."""
    written = set()
    for path in GRIDS:
        for cell in plan_cells(load_grid(REPO / path), out):
            if cell.cell_id in written or skipped(cell):
                continue
            written.add(cell.cell_id)
            cell.directory.mkdir(parents=True, exist_ok=True)
            result = {
                "cell": cell.cell_id,
                "config_hash": "0" * 16 if cell.cell_id == STALE else cell.config_hash,
                "label": cell.label,
                "pair": list(cell.pair.agents),
                "own_skills": {a: list(s) for a, s in cell.pair.own_skills.items()},
                "seed": cell.seed,
                "provenance": {"git_commit": "abc", "git_dirty": False},
                "timings": {"cell_seconds": 60.0},
                "models": {a: model_result(cell.label, a, cell.seed) for a in cell.agents},
            }
            (cell.directory / "result.json").write_text(json.dumps(result))
            if cell.config is not None:
                rows = metrics_rows(cell)
                (cell.directory / "run").mkdir()
                text = "".join(json.dumps(row) + "\n" for row in rows)
                (cell.directory / "run" / "metrics.jsonl").write_text(text)
    return written


def fake_build(cache: Path) -> str:
    """gap-d0 as built: build.json and one weight file per member; returns its key."""
    key = cache_key(pair_of("gap-d0-a"), 0)
    root = cache / f"gap-d0-{key}"
    digest = hashlib.sha256(WEIGHTS).hexdigest()
    for member in ("gap-d0-a", "gap-d0-b"):
        (root / member).mkdir(parents=True)
        (root / member / "model.safetensors").write_bytes(WEIGHTS)
    weights = {"gap-d0-a": digest, "gap-d0-b": digest}
    build = {"key": key, "seed": 0, "threads": 1, "weights_sha256": weights}
    (root / "build.json").write_text(json.dumps(build))
    return key


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The report of the synthetic cells: (results.json, report.md, printed lines, paths)."""
    base = tmp_path_factory.mktemp("gap")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRAFT_CACHE_DIR", str(base / "cache"))
        key = fake_build(base / "cache")
        out = base / "runs"
        written = write_cells(out)
        report_dir = base / "report"
        argv = ["--out", str(out), "--resamples", "400", "--report-dir", str(report_dir)]
        argv += ["--grids", *(str(REPO / g) for g in GRIDS)]
        assert main(argv) == 0
    results = json.loads((report_dir / "results.json").read_text())
    return {
        "results": results,
        "md": (report_dir / "report.md").read_text(),
        "dir": report_dir,
        "written": written,
        "key": key,
        "out": out,
        "cache": base / "cache",
    }


def entry(results: dict, name: str, scope: str) -> dict:
    found = [e for e in results["contrasts"] if e["contrast"] == name and e["scope"] == scope]
    assert len(found) == 1, (name, scope)
    return found[0]


def test_t_interval_and_detectable_effect_by_hand():
    values = [1.0, 2.0, 3.0, 1.0, 2.0]  # mean 1.8, sd sqrt(2.8 / 4)
    sd = np.sqrt(0.7)
    low, high = t_interval(values)
    assert (low, high) == pytest.approx(
        (1.8 - t975(4) * sd / np.sqrt(5), 1.8 + t975(4) * sd / np.sqrt(5))
    )
    assert detectable_effect(values) == pytest.approx((t975(4) + t80(4)) * sd / np.sqrt(5))
    # S = 6: the pre-registration's 1.43 x sd
    six = [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert detectable_effect(six) / np.std(six, ddof=1) == pytest.approx(1.425, abs=1e-3)
    # standard t-table values (3 decimals)
    table = (t80(4), t80(5), t80(29), t80(200), t975(4), t975(5))
    assert table == pytest.approx((0.941, 0.920, 0.854, 0.843, 2.776, 2.571), abs=5e-4)
    with pytest.raises(ValueError, match="at least 2"):
        t_interval([1.0])
    with pytest.raises(ValueError, match="df >= 1"):
        t80(0)


def test_each_model_is_scored_on_its_own_gap_family():
    grids = [load_grid(REPO / GRIDS[0])]
    found = gap_models(grids)
    assert found["gap-d0-a"].family == "borrow"
    assert found["gap-d0-a"].gap_set == "procedural/subtraction"
    assert found["gap-d0-a"].strength_set == "procedural/addition"
    assert found["gap-d30-b"].family == "carry"
    assert found["gap-d30-b"].gap_set == "procedural/addition"
    assert found["gap-d15-b"].nominal_dose == 0.15 and found["gap-d15-b"].role == "b"


def test_the_cells_read_stale_and_missing(study):
    cells = study["results"]["cells"]
    assert cells["planned"] == 128 + 24 + 40  # gap-n32 shares 28 cells with gap.yaml
    assert cells["stale"] == [STALE]
    assert cells["finished"] == len(study["written"]) - 1
    assert cells["missing"] == cells["planned"] - len(study["written"])
    assert cells["per_grid"]["gap-n32"]["planned"] == 52


def test_a_planted_effect_is_found_in_every_scope(study):
    results = study["results"]
    for scope in ("a", "b", "pooled"):
        e = entry(results, "H1w", scope)
        assert e["seeds"] == [0, 1, 2, 3, 4, 5] and e["excluded_seeds"] == {}
        assert e["verdict"] == "supported" and e["bootstrap"]["low"] > 0
    a = entry(results, "H1w", "a")
    assert (a["bootstrap"]["mean"], a["bootstrap"]["low"]) == pytest.approx((50.0, 50.0))
    b = [expected(NO_COMPAT, "gap-d0-b", s) - expected(GRPO8, "gap-d0-b", s) for s in range(6)]
    assert list(entry(results, "H1w", "b")["per_seed"].values()) == pytest.approx(b)
    pooled = entry(results, "H1w", "pooled")
    assert pooled["bootstrap"]["mean"] == pytest.approx((50.0 + np.mean(b)) / 2)
    # the strength family (the forgetting guard): 2 of 4, GRPO n=32's 1 of 4
    strength = {r["label"]: r["strength"]["mean"] for r in results["scores"]}
    assert strength[GRPO32] == 25.0 and strength[GRAFT] == strength["base"] == 50.0


def test_a_null_is_not_found_and_an_unresolvable_one_says_so(study):
    results = study["results"]
    a = entry(results, "H1", "a")  # GRAFT == GRPO n=8 exactly
    assert a["bootstrap"]["mean"] == 0.0 and a["verdict"] == "unresolved" and a["mde"] == 0.0
    b = entry(results, "H1", "b")  # +1, -1, ... samples: mean 0, sd > 0
    assert list(b["per_seed"].values()) == pytest.approx([POINT, -POINT] * 3)
    assert b["bootstrap_verdict"] == "unresolved" and b["verdict"] == NOT_RESOLVABLE
    assert b["mde"] == pytest.approx(
        (t975(5) + t80(5)) * np.std([POINT, -POINT] * 3, ddof=1) / np.sqrt(6)
    )
    assert "not resolvable here" in study["md"]


def test_a_missing_seed_leaves_its_contrast_and_the_t_interval_by_hand(study):
    results = study["results"]
    h1f = entry(results, "H1f", "a")
    assert h1f["seeds"] == [0, 1, 2, 3, 4]
    assert h1f["excluded_seeds"] == {"5": [f"{NO_FLOOR} on gap-d0-a"]}
    gains = np.array([1, 2, 3, 1, 2]) * POINT
    assert list(h1f["per_seed"].values()) == pytest.approx(gains)
    assert h1f["bootstrap"]["mean"] == pytest.approx(gains.mean())
    half = t975(4) * gains.std(ddof=1) / np.sqrt(5)
    assert (h1f["t_interval"]["low"], h1f["t_interval"]["high"]) == pytest.approx(
        (gains.mean() - half, gains.mean() + half)
    )
    assert h1f["mde"] == pytest.approx((t975(4) + t80(4)) * gains.std(ddof=1) / np.sqrt(5))
    # the gain is on one problem of six: resampled problems often miss it, so the bootstrap
    # interval reaches 0 while the t-interval (seeds only) lies above it: flagged
    assert h1f["bootstrap"]["low"] == 0.0 and h1f["t_verdict"] == "supported"
    assert h1f["disagree"] and h1f["verdict"] == "unresolved"
    assert "FLAG" in study["md"]
    assert entry(results, "H1", "a")["seeds"] == [0, 1, 2, 3, 4, 5]  # GRAFT's cells all ran
    assert entry(results, "H4", "pooled")["seeds"] == [0, 1, 2, 3, 4]
    # the stale cell is not read: its seed leaves N2 for gap-weak-b
    n2 = entry(results, "N2", "b")
    assert n2["seeds"] == [0, 1, 2, 4, 5] and n2["excluded_seeds"] == {
        "3": [f"{GRPO8} on gap-weak-b"]
    }


def test_every_contrast_equals_the_mean_of_its_per_seed_values(study):
    ran = [e for e in study["results"]["contrasts"] if e["verdict"] != "not run"]
    assert len(ran) > 40
    for e in ran:
        assert e["bootstrap"]["mean"] == pytest.approx(np.mean(list(e["per_seed"].values())))
        for s, value in e["per_seed"].items():
            terms = [(t["label"], t["model"], t["weight"]) for t in e["terms"]]
            assert value == pytest.approx(sum(w * expected(lab, m, int(s)) for lab, m, w in terms))


def test_non_inferiority_nulls_and_not_run(study):
    results = study["results"]
    assert entry(results, "H5 GRAFT gap-d0", "pooled")["verdict"] == "refuted"
    assert entry(results, "H5 GRAFT w/o compat. gap-d0", "a")["verdict"] == "supported"  # 0 > -1
    not_run = entry(results, "H5 GRAFT gap-d30", "a")
    assert not_run["verdict"] == "not run"
    assert not_run["not_run"] == f"no finished cells of {GRPO32} on gap-d30-a"
    assert entry(results, "D gap-d5 GRAFT", "pooled")["verdict"] == "not run"
    assert entry(results, "H3 GRAFT w/o compat.", "a")["bootstrap"]["mean"] == pytest.approx(50.0)
    assert entry(results, "N1", "pooled")["verdict"] == "supported"  # contains 0
    n2 = entry(results, "N2", "pooled")
    assert n2["verdict"] == "refuted" and n2["bootstrap"]["mean"] == pytest.approx(25.0)
    assert "| H5 GRAFT gap-d30 | a (gap-d30-a) | – | – | – | – | – | not run |" in study["md"]


def test_h2_lists_the_points_whose_cells_kept_no_metrics_log(study, tmp_path, monkeypatch):
    """A dose whose exchange cells kept result.json only has no measured candidates: its
    points are left out of the slope and named, not dropped silently."""
    out = tmp_path / "runs"
    shutil.copytree(study["out"], out)
    for log in (out / "cells" / "graft-w-o-compat-weights").glob(
        "gap-d0-*/seed*/run/metrics.jsonl"
    ):
        log.unlink()
    monkeypatch.setenv("GRAFT_CACHE_DIR", str(study["cache"]))
    argv = ["--out", str(out), "--resamples", "50", "--report-dir", str(tmp_path / "report")]
    assert main([*argv, "--grids", *(str(REPO / g) for g in GRIDS)]) == 0
    results = json.loads((tmp_path / "report" / "results.json").read_text())
    h2 = entry(results, f"H2 {NO_COMPAT}", "both models")
    assert h2["points_unmeasured"] == ["gap-d0 (gap-d0-a)", "gap-d0 (gap-d0-b)"]
    assert [p["candidates_per_step"] for p in h2["points"]][2:] == [4.0, 5.0, 2.0, 3.0]
    assert "coefficient" not in h2["points"][0] and "coefficient" in h2["points"][2]
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"- H2 {NO_COMPAT}: left out, no gate candidates measured" in md
    assert entry(results, f"H2 {GRAFT}", "both models")["points_unmeasured"] == []


def test_h2_is_the_slope_over_the_measured_candidates(study):
    h2 = entry(study["results"], f"H2 {NO_COMPAT}", "both models")
    assert h2["doses"] == ["gap-d0", "gap-d15", "gap-d30"] and h2["doses_missing"] == ["gap-d5"]
    xs = [p["candidates_per_step"] for p in h2["points"]]
    assert xs == [6.0, 7.0, 4.0, 5.0, 2.0, 3.0]  # a's direction, then b's, per dose
    ys = [
        np.mean(
            [expected(NO_COMPAT, p["model"], s) - expected(GRPO8, p["model"], s) for s in range(6)]
        )
        for p in h2["points"]
    ]
    slope = np.polyfit(xs, ys, 1)[0]
    assert h2["bootstrap"]["mean"] == pytest.approx(slope)
    assert slope > 10 and h2["verdict"] == "supported"
    assert [p["difference"] for p in h2["points"]] == pytest.approx(ys)
    assert entry(study["results"], f"H2 {GRAFT}", "both models")["verdict"] != "supported"
    assert "no finished cells at gap-d5 (a deviation from the four doses)" in study["md"]
    streams = {"gap-d0": [0, 0], "gap-d15": [0, 2], "gap-d30": [0, 3]}  # (seed 0, dose index)
    assert h2["bootstrap_streams"] == streams
    assert "its bootstrap resamples within each dose" in study["md"]


def test_doses_provenance_and_the_paper(study):
    results = study["results"]
    doses = results["doses"]
    assert doses["gap-d0"]["members"]["a"]["measured"] == 0.0
    assert doses["gap-d15"]["measured"] == pytest.approx(12.5)
    assert doses["gap-d30"]["members"]["b"]["measured"] == pytest.approx(100 * 8 / 24)
    assert doses["gap-d30"]["members"]["b"]["peer_on_gap"] == pytest.approx(50.0)
    assert doses["gap-d30"]["nominal"] == pytest.approx(30.0)
    assert doses["gap-d5"]["measured"] is None  # its base cells did not run
    pairs = results["provenance"]["pairs"]
    assert pairs["gap-d0"]["cache_key"] == study["key"] and pairs["gap-d0"]["threads"] == 1
    member = pairs["gap-d0"]["members"]["gap-d0-a"]
    assert member["weights_sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    assert member["matches_build_json"] is True
    assert pairs["gap-d15"]["members"]["gap-d15-a"]["weights_sha256"] == "unbuilt"
    assert results["provenance"]["machine"]["torch"]
    paper = {c["claim"]: c for c in results["against_paper"]}
    assert paper[f"GRAFT beats {GRPO8}"]["agreement"] == "unresolved"
    assert (
        paper[f"GRAFT approaches {GRPO32} at a quarter of the rollouts"]["agreement"] == "disagree"
    )
    assert "25%" in paper[f"GRAFT approaches {GRPO32} at a quarter of the rollouts"]["here"]
    assert paper["the floor matters"]["paper"] == "-1.9 / -3.6 points without the floor"
    # H1w holds and N2 is above 0: read as an artefact of the exchange path
    assert paper["when exchange helps (the dose-response)"]["artefact"] is True
    assert "## Against the paper" in study["md"]
    first = {(r["label"], r["direction"]): r for r in results["first_steps"]}
    assert len(first) == 3 * 3 * 2 + 2 * 2  # three arms at three doses, one at the controls
    row = first[(NO_COMPAT, "gap-d0-b->gap-d0-a")]
    assert (row["steps"], row["gate_candidates"], row["kept"]) == (3, 6.0, 2.0)
    assert (row["floor_pass"], row["mean_s"]) == (0.5, 0.5)
    for name in ("dose_response.png", "learning_curves.png"):
        assert (study["dir"] / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def correlated_study(resamples: int = 2000) -> Study:
    """Two doses (gap-d0, gap-d30), both models, six seeds, twelve problems a set: at every
    (dose, model) the arm - GRPO n=8 difference is the same seed effect on every problem
    (0 or 2 of 4 extra samples, alternating seeds) plus 2 of 4 at gap-d0. The seed effect is
    perfectly correlated across doses, so a bootstrap that shares one seed draw across the
    doses cancels it out of the slope (whose coefficients sum to 0); resampled within each
    dose, as registered, it does not (each dose's coefficients sum to +-4/17)."""
    problems, k = 12, 4
    candidates = {"gap-d0-a": 6.0, "gap-d0-b": 7.0, "gap-d30-a": 2.0, "gap-d30-b": 3.0}
    gaps, records, results, logs = {}, {}, [], {}
    for model in candidates:
        pair, role = split(model)
        gap_set = GAP_SET[role]
        strength = next(name for name in GAP_SET.values() if name != gap_set)
        gaps[model] = GapModel(model, pair, role, "borrow", gap_set, strength, 0.0)
        for label in (NO_COMPAT, GRPO8):
            by_seed = {}
            for seed in range(6):
                extra = 2 * (seed % 2) + 2 * (pair == "gap-d0") if label == NO_COMPAT else 0
                counts = {gap_set: extra, strength: 1}
                by_seed[seed] = {
                    "label": label,
                    "model": model,
                    "seed": seed,
                    "problems": {
                        name: {f"{name}/{i}": c for i in range(problems)}
                        for name, c in counts.items()
                    },
                    "samples": dict.fromkeys(counts, k),
                }
            records[(label, model)] = by_seed
    for pair in ("gap-d0", "gap-d30"):
        for seed in range(6):
            cell = f"{NO_COMPAT}/{pair}/seed{seed}"
            results.append({"cell": cell, "label": NO_COMPAT, "seed": seed, "models": {}})
            results[-1]["models"] = {f"{pair}-a": {}, f"{pair}-b": {}}
            logs[cell] = [
                {"agent": f"{pair}-{role}", f"exchange/{pair}-{peer}->{pair}-{role}/gate_"
                 "candidates": candidates[f"{pair}-{role}"]}
                for role, peer in (("a", "b"), ("b", "a"))
            ]  # fmt: skip
    planned = {key: set(range(6)) for key in records}
    return Study(gaps, records, planned, results, logs, {"resamples": resamples, "seed": 0})


def inputs(study: Study, terms, seeds) -> tuple:
    """`paired_contrast`'s positional arguments for the terms on the seeds."""
    records, weights, sets = _bootstrap_inputs(study, terms, seeds)
    return records, GAP_MODEL, weights, sets


def test_h2_resamples_each_dose_on_its_own():
    study = correlated_study()
    h2 = slope_entry(study, NO_COMPAT)
    coefficients = {p["model"]: p["coefficient"] for p in h2["points"]}
    assert coefficients == pytest.approx(
        {"gap-d0-a": 1.5 / 17, "gap-d0-b": 2.5 / 17, "gap-d30-a": -2.5 / 17, "gap-d30-b": -1.5 / 17}
    )
    slope = 50.0 * 4 / 17  # only gap-d0's 2 of 4 survives the zero-sum coefficients
    assert h2["bootstrap"]["mean"] == pytest.approx(slope)
    assert list(h2["per_seed"].values()) == pytest.approx([slope] * 6)  # the seed effect cancels
    assert h2["sd"] == pytest.approx(0.0, abs=1e-9)
    # one seed draw shared across the doses (the joint bootstrap): the seed effect cancels in
    # every replicate too, a zero-width interval
    terms = [
        (label, m, c * w)
        for m, c in coefficients.items()
        for label, w in ((NO_COMPAT, 1), (GRPO8, -1))
    ]
    joint = paired_contrast(*inputs(study, terms, list(range(6))), resamples=2000)
    assert joint.high - joint.low == pytest.approx(0.0, abs=1e-9)
    # within each dose: the slope's replicates are the sums of each dose's own replicates,
    # drawn from the stream (bootstrap seed 0, the dose's index in DOSES)
    assert h2["bootstrap_streams"] == {"gap-d0": [0, 0], "gap-d30": [0, 3]}
    parts = [
        contrast_replicates(
            *inputs(study, [t for t in terms if t[1].startswith(pair)], list(range(6))),
            resamples=2000,
            seed=stream,
        )
        for pair, stream in (("gap-d0-", [0, 0]), ("gap-d30-", [0, 3]))
    ]
    low, high = np.quantile(parts[0].values + parts[1].values, [0.025, 0.975])
    assert (h2["bootstrap"]["low"], h2["bootstrap"]["high"]) == pytest.approx((low, high))
    # each dose's part has sd (4/17) x 25 / sqrt(6) ~ 2.4 points (the seed effect's 0 or 50
    # points: sd 25), the sum of two independent ones ~ 3.4: a 95 % interval ~ 12-13 wide
    assert high - low > 8.0
    assert h2["t_interval"]["high"] - h2["t_interval"]["low"] == pytest.approx(0.0, abs=1e-9)


def test_contrast_replicates_are_paired_contrasts_bootstrap():
    built = correlated_study()
    terms = [(NO_COMPAT, "gap-d0-b", 1.0), (GRPO8, "gap-d0-b", -1.0), (NO_COMPAT, "gap-d30-a", 0.5)]
    args = inputs(built, terms, [0, 1, 2, 3, 4])
    boot = paired_contrast(*args, resamples=500, seed=7)
    found = contrast_replicates(*args, resamples=500, seed=7)
    assert found.mean == pytest.approx(boot.mean)
    assert np.quantile(found.values, [0.025, 0.975]) == pytest.approx([boot.low, boot.high])
    assert (found.seeds, found.problems) == (boot.seeds, boot.problems) == (5, 24)
    other = contrast_replicates(*args, resamples=500, seed=[7, 1])
    assert not np.array_equal(other.values, found.values)  # another stream


def test_a_supported_gain_is_read_against_the_null_controls():
    """Section 4's artefact reading: a supported gain (H1 or a dose row) with a null above 0 is
    an artefact; with a null not run it cannot be checked (None, and the text says so)."""
    from benchmarks.study.gap.paper import _artefact_note, artefact

    def null(name: str, verdict: str, mean: float) -> dict:
        return {
            "contrast": name,
            "scope": "pooled",
            "verdict": verdict,
            "bootstrap": {"mean": mean},
        }

    gain = {"D gap-d30 GRAFT": "supported", "H1": "unresolved"}
    held = [null("N1", "supported", 0.1), null("N2", "supported", -0.2)]
    failed = [null("N1", "supported", 0.1), null("N2", "refuted", 1.5)]
    verdicts = {e["contrast"]: e["verdict"] for e in held}
    assert artefact([], gain) is None
    assert "N1, N2 not run" in _artefact_note([], gain)
    assert artefact(held, {**gain, **verdicts}) is False
    failed_v = {e["contrast"]: e["verdict"] for e in failed}
    assert artefact(failed, {**gain, **failed_v}) is True
    assert "N2 above 0" in _artefact_note(failed, {**gain, **failed_v})
    # a null refuted below 0 is no artefact of a gain; no supported gain, nothing to read
    below = [null("N1", "supported", 0.1), null("N2", "refuted", -1.5)]
    assert artefact(below, {**gain, **{e["contrast"]: e["verdict"] for e in below}}) is False
    assert artefact(failed, {"H1": "unresolved", **failed_v}) is False
    assert _artefact_note(failed, {"H1": "unresolved", **failed_v}) == ""
