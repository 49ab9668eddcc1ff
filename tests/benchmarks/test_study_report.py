"""The study report: hypotheses on planted effects, the exchange funnel, and the whole
report on synthetic cell results of the real study grid (configs/grids/study.yaml).

Every cell is evaluated on six problems per set, k = 4 samples. A model's own-skill
problems have 1, 2, 3, 2, 1, 3 correct samples (seed 1: one more on the first), its weak
skills' (the peer's own) 0, 1, 0, 1, 0, 2; an algorithm adds a fixed number of correct
samples to every problem of the weak or the own skills, so every contrast is the same on
every problem and seed: its interval is degenerate and its value can be computed by hand.
A gain of 2 of 4 on the three weak sets of six moves the average by 25 points.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks.compare.cells import plan_cells
from benchmarks.compare.grid import load_grid
from benchmarks.compare.report import cell_records, compute_rows
from benchmarks.study.curves import funnel, metrics_logs
from benchmarks.study.hypotheses import (
    GRAFT,
    GRPO8,
    GRPO32,
    NO_BALANCE,
    NO_COMPAT,
    NO_FLOOR,
    NO_GAIN,
    STORED,
    hypothesis_results,
    study_table,
)
from benchmarks.study.report import main

GRID = Path(__file__).resolve().parents[2] / "configs" / "grids" / "study.yaml"
PAIR = ["testbed-a", "testbed-b"]
OWN = {
    "testbed-a": ["addition", "multiplication", "linear_equation"],
    "testbed-b": ["subtraction", "modular", "gcd"],
}
SETS = [f"procedural/{s}" for s in OWN["testbed-a"] + OWN["testbed-b"]]
K = 4
OWN_COUNTS, WEAK_COUNTS = [1, 2, 3, 2, 1, 3], [0, 1, 0, 1, 0, 2]
# (model, label) -> correct samples added to each (weak, own) problem
GAINS = {
    ("testbed-a", GRAFT): (2, 0),
    ("testbed-a", NO_COMPAT): (2, 0),
    ("testbed-a", NO_BALANCE): (2, 1),
    ("testbed-a", STORED): (2, 0),
    ("testbed-b", STORED): (2, 0),
}
EXCHANGE = (GRAFT, NO_COMPAT, NO_FLOOR, NO_BALANCE, STORED)
BOOTSTRAP = {"resamples": 200, "seed": 0}


def successes(model: str, label: str, seed: int | None) -> dict[str, list[int]]:
    weak_gain, own_gain = GAINS.get((model, label), (0, 0))
    out = {}
    for name in SETS:
        own = name.removeprefix("procedural/") in OWN[model]
        counts = [
            c + (own_gain if own else weak_gain) for c in (OWN_COUNTS if own else WEAK_COUNTS)
        ]
        counts[0] += int(own and seed == 1)
        out[name] = counts
    return out


def model_result(model: str, label: str, seed: int | None) -> dict:
    """One model's entry of result.json (benchmarks as `report.result_dict` writes them)."""
    benchmarks = {
        name: {
            "pass@1": sum(counts) / (K * len(counts)),
            "k": K,
            "problem_ids": [f"{name}/test/{i}" for i in range(len(counts))],
            "successes": [counts],  # one repeat
        }
        for name, counts in successes(model, label, seed).items()
    }
    average = sum(b["pass@1"] for b in benchmarks.values()) / len(benchmarks)
    trained = label != "base"
    n = 32 if label == GRPO32 else 8
    return {
        "model": model,
        "eval": {"benchmarks": benchmarks, "average": {"pass@1": average}},
        "checkpoint_steps": 4 if trained else None,
        "rollouts_to_checkpoint": 4 * 16 * n if trained else None,
        "train_seconds_to_checkpoint": 100.0 if trained else None,
        "curves": None,
        "train_counts": None,
    }


def cell_result(label: str, agents: list[str], seed: int | None, cell="", config_hash="") -> dict:
    """A cell's result.json as `compare.run_cell` writes it (the fields the reports read)."""
    return {
        "cell": cell,
        "config_hash": config_hash,
        "label": label,
        "pair": PAIR,
        "own_skills": OWN,
        "seed": seed,
        "provenance": {"git_commit": "abc", "git_dirty": False},
        "timings": {"cell_seconds": 120.0 * len(agents)},
        "models": {agent: model_result(agent, label, seed) for agent in agents},
    }


def in_memory_results(labels=(GRPO8, GRPO32, *EXCHANGE)) -> list[dict]:
    results = [cell_result("base", [model], None) for model in PAIR]
    for seed in (0, 1, 2):
        for label in labels:
            single = label in (GRPO8, GRPO32, STORED)
            for agents in [[m] for m in PAIR] if single else [PAIR]:
                results.append(cell_result(label, agents, seed))
    return results


def analysed(labels=(GRPO8, GRPO32, *EXCHANGE)):
    records = cell_records(in_memory_results(labels))
    all_labels = [GRPO8, GRPO32, *EXCHANGE]
    rows = study_table(records, all_labels, GRPO8, **BOOTSTRAP)
    compute = compute_rows(records, all_labels)
    return {
        (e["hypothesis"], e["model"]): e
        for model in PAIR
        for e in hypothesis_results(records, model, rows, compute, **BOOTSTRAP)
    }, rows


def estimate(entry) -> tuple[float, float, float]:
    return entry["estimate"]["mean"], entry["estimate"]["low"], entry["estimate"]["high"]


def test_hypotheses_on_planted_effects_for_the_model_with_a_live_gain():
    entries, _ = analysed()
    a = {name: entries[(name, "testbed-a")] for name in ("H1", "H2", "H3", "H4", "H5", "H6", "H7")}
    assert estimate(a["H1"]) == pytest.approx((25.0, 25.0, 25.0))
    assert [a[h]["verdict"] for h in a] == [
        "supported",  # H1 +25
        "supported",  # H2 +25 vs GRPO n=32, which equals GRPO n=8 here
        "unresolved",  # H3 GRAFT == w/o compat: an interval at exactly 0
        "supported",  # H4 w/o floor gains nothing
        "refuted",  # H5 w/o balancing also gains 1 of 4 on own skills: -12.5
        "supported",  # H6 stored keeps all of it: 25 - 12.5 - 0
        "supported",  # H7
    ]
    assert a["H2"]["details"]["rollout_share"] == pytest.approx(0.25)
    assert estimate(a["H5"]) == pytest.approx((-12.5, -12.5, -12.5))
    assert estimate(a["H6"]) == pytest.approx((12.5, 12.5, 12.5))
    assert a["H6"]["details"]["retention"] == pytest.approx(1.0)
    # H7: +50 on each weak set (2 of 4), 0 on the own: (+1/3) x 3 x 50 - 0
    assert estimate(a["H7"]) == pytest.approx((50.0, 50.0, 50.0))
    assert a["H7"]["set_weights"] == {
        **dict.fromkeys(SETS[3:], pytest.approx(1 / 3)),
        **dict.fromkeys(SETS[:3], pytest.approx(-1 / 3)),
    }
    assert a["H7"]["details"]["weak_skills_delta"]["mean"] == pytest.approx(50.0)
    assert a["H7"]["details"]["own_skills_delta"]["mean"] == pytest.approx(0.0)
    # testbed-a's all-fail problems under GRPO n=8: the weak ones with 0 of 4, which
    # testbed-b (trained the same way) solves; GRAFT lifts them to 2 of 4: none left
    assert a["H7"]["details"][f"rescue {GRPO8}"] == pytest.approx(1.0)
    assert a["H7"]["details"][f"rescue {GRAFT}"] is None


def test_h6_is_unresolved_without_a_live_gain_whatever_its_contrast_says():
    entries, _ = analysed()
    h1, h6 = entries[("H1", "testbed-b")], entries[("H6", "testbed-b")]
    assert h1["verdict"] == "unresolved" and estimate(h1) == pytest.approx((0.0, 0.0, 0.0))
    # stored gains 25 points where GRAFT gains none: the contrast alone is supported
    assert estimate(h6) == pytest.approx((25.0, 25.0, 25.0))
    assert h6["verdict"] == NO_GAIN and h6["details"]["contrast_verdict"] == "supported"
    assert h6["details"]["retention"] is None  # no gain to divide by


def test_a_hypothesis_whose_labels_have_no_cells_is_listed_as_not_run():
    entries, rows = analysed(labels=(GRPO8, GRAFT, NO_FLOOR, STORED))
    for model in PAIR:
        for name in ("H2", "H3", "H5"):
            entry = entries[(name, model)]
            assert entry["verdict"] == "not run" and entry["estimate"] is None
            assert "no finished cells of" in entry["details"]["not_run"]
        assert entries[("H4", model)]["verdict"] != "not run"
    assert len(entries) == 2 * 7
    assert [r["label"] for r in rows if r["model"] == "testbed-a"] == [
        "base",
        GRPO8,
        GRAFT,
        NO_FLOOR,
        STORED,
    ]


def test_table_rows_carry_intervals_and_paired_deltas():
    _, rows = analysed()
    by = {(r["model"], r["label"]): r for r in rows}
    grpo = by[("testbed-a", GRPO8)]
    # own sets (1+2+3+2+1+3)/24 = 50 % (seed 1: 12/24 + 1/24), weak 4/24: mean over seeds
    expected = 100 * ((0.5 + 0.5 + 13 / 24) / 3 + 4 / 24) / 2
    assert grpo["interval"]["mean"] == pytest.approx(expected)
    assert grpo["interval"]["low"] < grpo["interval"]["mean"] < grpo["interval"]["high"]
    assert grpo["delta"] is None
    assert by[("testbed-a", GRAFT)]["delta"]["mean"] == pytest.approx(25.0)
    assert by[("testbed-a", "base")]["delta"]["mean"] == pytest.approx(-100 / 3 / 24 * 1 / 2)


def write_metrics(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def exchange_row(step, source, agent, gate, kept, transferred, admitted, s=None, peer_tokens=0):
    prefix = f"exchange/{source}->{agent}"
    row = {
        "step": step,
        "agent": agent,
        f"{prefix}/candidates": gate,
        f"{prefix}/gate_candidates": gate,
        f"{prefix}/prompts": kept,
        f"{prefix}/transferred": transferred,
        f"{prefix}/admitted": admitted,
        "loss_fn/peer_tokens": peer_tokens,
        "clipped_share_peer": 0.5 if peer_tokens else 0.0,
        "exchange/s/count": 0 if s is None else transferred,
    }
    if s is not None:
        row.update({"exchange/s/mean": s, "exchange/s/p10": s - 0.1, "exchange/s/p90": s + 0.1})
    return row


def test_the_funnel_sums_steps_then_averages_seeds(tmp_path):
    results = []
    for seed, admitted in ((0, 4), (1, 0)):
        cell = f"graft/testbed-a+testbed-b/seed{seed}"
        rows = [
            exchange_row(0, "testbed-b", "testbed-a", 3, 1, 8, admitted, s=0.9, peer_tokens=50),
            exchange_row(1, "testbed-b", "testbed-a", 1, 0, 0, 0),
            {"step": 0, "agent": "testbed-b", "reward_mean": 0.5},  # receives nothing logged
        ]
        write_metrics(tmp_path / "cells" / cell / "run" / "metrics.jsonl", rows)
        results.append(cell_result(GRAFT, PAIR, seed, cell=cell))
    found = funnel(results, metrics_logs(tmp_path, results))
    assert list(found) == [GRAFT] and list(found[GRAFT]) == ["testbed-b->testbed-a"]
    direction = found[GRAFT]["testbed-b->testbed-a"]
    assert direction["seeds"] == 2
    assert direction["totals"] == pytest.approx(
        {
            "gate_candidates": 4.0,
            "prompts": 1.0,
            "transferred": 8.0,
            "admitted": 2.0,
            "admitted_share": 0.25,
            "clipped_share_peer": 0.5,  # only the steps with peer tokens
            "mean_s": 0.9,
        }
    )
    assert direction["curves"]["admitted"] == {"step": [0, 1], "mean": [2.0, 0.0], "seeds": [2, 2]}
    assert direction["curves"]["s_mean"]["step"] == [0]  # no s where nothing was transferred


def fake_cells(out: Path, skipped: tuple[str, ...]) -> int:
    """result.json (and metrics.jsonl for trained cells) for every planned cell of the study
    grid under `out` whose label is not in `skipped`; returns how many were written."""
    written = 0
    for cell in plan_cells(load_grid(GRID), out):
        if cell.label in skipped:
            continue
        result = cell_result(
            cell.label, list(cell.agents), cell.seed, cell.cell_id, cell.config_hash
        )
        (cell.directory).mkdir(parents=True)
        (cell.directory / "result.json").write_text(json.dumps(result))
        written += 1
        if cell.config is None:
            continue
        rows = []
        for step in range(4):
            for agent in cell.agents:
                peer = next(a for a in PAIR if a != agent)
                row = {"step": step, "agent": agent, "reward_mean": 0.1 * step}
                if cell.label in EXCHANGE:
                    s = None if cell.label == NO_COMPAT else 0.7 + 0.05 * step
                    admitted = 12 if cell.label == NO_FLOOR else 6 + step
                    row.update(exchange_row(step, peer, agent, 4, 2, 16, admitted, s, 100))
                if step % 2:  # periodic evaluation every 2 steps
                    evaluated = successes(agent, cell.label, cell.seed)
                    rates = {n: (step / 4) * sum(c) / (K * len(c)) for n, c in evaluated.items()}
                    row |= {f"eval/{n}/pass@1": v for n, v in rates.items()}
                    row["eval/average/pass@1"] = sum(rates.values()) / len(rates)
                rows.append(row)
        write_metrics(cell.directory / "run" / "metrics.jsonl", rows)
    return written


def test_the_report_of_a_partly_run_study(tmp_path, capsys):
    runs, out = tmp_path / "runs", tmp_path / "report"
    written = fake_cells(runs, skipped=(NO_BALANCE,))
    assert written == 2 + 5 * (2 + 2 + 1 + 1 + 1 + 2)  # base, then per seed (5); no balancing
    argv = ["--grid", str(GRID), "--runs", str(runs), "--out", str(out), "--resamples", "200"]
    assert main(argv) == 0
    assert "H5 testbed-a: not run" in capsys.readouterr().out
    for name in ("README.md", "results.json", "learning_curves.png"):
        assert (out / name).is_file(), name
    for name in ("learning_curves_weak.png", "funnel.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name

    readme = (out / "README.md").read_text()
    assert f"Cells finished: {written} of 52, " in readme
    table = [line for line in readme.splitlines() if line.startswith("| testbed-")]
    labels = ["base", GRPO8, GRPO32, GRAFT, NO_COMPAT, NO_FLOOR, STORED]
    first_table = [line.split(" | ")[:2] for line in table[: 2 * len(labels)]]
    assert first_table == [
        [f"| {m} ({p})", label] for m, p in (PAIR, PAIR[::-1]) for label in labels
    ]
    assert "| testbed-a (testbed-b) | GRAFT | 5 | " in readme  # the grid's 5 seeds
    assert "+25.0 [+25.0, +25.0]" in readme  # GRAFT's Δ on testbed-a
    assert "| H5 | balancing helps | testbed-a | – | – | not run |" in readme
    assert (
        "| H6 | stored peers keep more than half of the live gain | testbed-b | +25.0 |" in readme
    )
    assert NO_GAIN in readme
    assert "testbed-a ±0.0 points" in readme

    report = json.loads((out / "results.json").read_text())
    assert len(report["hypotheses"]) == 14
    assert report["skills"]["testbed-a"] == {"weak": SETS[3:], "own": SETS[:3]}
    curves = {(c["model"], c["label"]): c for c in report["learning_curves"]["weak_skills"]}
    assert curves[("testbed-a", GRAFT)]["step"] == [2, 4]
    # the weak skills' pass@1 at the end: (0+1+0+1+0+2 + 6 x 2) / 24, scaled by 3/4
    assert curves[("testbed-a", GRAFT)]["mean"][-1] == pytest.approx(0.75 * 16 / 24)
    stored = report["funnel"][STORED]
    assert set(stored) == {"testbed-a->testbed-b", "testbed-b->testbed-a"}
    assert report["funnel"][NO_FLOOR]["testbed-b->testbed-a"]["totals"]["admitted_share"] == 0.75
    assert report["funnel"][NO_COMPAT]["testbed-a->testbed-b"]["totals"]["mean_s"] is None
    build = report["provenance"]["build"]
    assert set(build["weights"]) == set(PAIR) and build["machine"]["cpu_flags"] is not None
    assert build["machine"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_set_restricts_the_analysis_to_the_named_seeds(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "report"
    fake_cells(runs, skipped=())
    argv = ["--grid", str(GRID), "--runs", str(runs), "--out", str(out), "--resamples", "50"]
    assert main([*argv, "--set", "seeds=[0,1]"]) == 0
    report = json.loads((out / "results.json").read_text())
    assert {tuple(row["seeds"]) for row in report["table"] if row["label"] != "base"} == {(0, 1)}
    assert all(e["estimate"]["seeds"] == 2 for e in report["hypotheses"] if e["estimate"])
