"""Table arithmetic, curves and plots of `graft compare`, on hand-made cell results.

Two sets of two problems each, k = 4 samples, so a pass@1 is (s1 + s2) / 8 and every
expected number below can be checked by hand. tiny-a's own skill is addition, tiny-b's
subtraction, so each model's weak skill is the other one.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.compare.plots import (
    arm_styles,
    band,
    complementarity,
    learning_curves,
    write_plots,
)
from benchmarks.compare.report import (
    cell_records,
    compute_rows,
    provenance_summary,
    table_rows,
    write_reports,
)

K = 4
SETS = ("procedural/addition", "procedural/subtraction")
PAIR = ["tiny-a", "tiny-b"]
OWN = {"tiny-a": ["addition"], "tiny-b": ["subtraction"]}
PROVENANCE = {"git_commit": "abc", "git_dirty": False}


def model_result(successes: dict[str, list[int]], seconds: float = 10.0, **extra) -> dict:
    """One model's entry of a cell result: per set, successes of k = 4 per problem."""
    benchmarks = {
        name: {
            "pass@1": sum(counts) / (K * len(counts)),
            "k": K,
            "problem_ids": [f"{name}/{i}" for i in range(len(counts))],
            "successes": [counts],
        }
        for name, counts in successes.items()
    }
    average = sum(b["pass@1"] for b in benchmarks.values()) / len(benchmarks)
    return {
        "eval": {"benchmarks": benchmarks, "average": {"pass@1": average}},
        "checkpoint_steps": None if extra.get("base") else 2,
        "rollouts_to_checkpoint": None if extra.get("base") else 16,
        "train_seconds_to_checkpoint": None if extra.get("base") else seconds,
        "curves": extra.get("curves"),
        "train_counts": extra.get("train_counts"),
    }


def cell(label: str, seed: int | None, models: dict[str, dict], seconds: float = 30.0) -> dict:
    return {
        "label": label,
        "pair": PAIR,
        "seed": seed,
        "own_skills": OWN,
        "timings": {"cell_seconds": seconds},
        "provenance": PROVENANCE,
        "models": models,
    }


def counts(add: list[int], sub: list[int]) -> dict[str, list[int]]:
    return dict(zip(SETS, (add, sub), strict=True))


A_GRPO_ADD = {0: [2, 0], 1: [2, 2], 2: [4, 2]}  # pass@1 0.25, 0.5, 0.75
A_GRAFT_SUB = {0: [0, 0], 1: [2, 0], 2: [4, 0]}  # pass@1 0, 0.25, 0.5
B_COUNTS = counts([0, 0], [4, 4])  # tiny-b: solves subtraction, never addition


def results() -> list[dict]:
    cells = [
        cell("base", None, {"tiny-a": model_result(counts([2, 2], [0, 0]), base=True)}),
        cell("base", None, {"tiny-b": model_result(B_COUNTS, base=True)}),
    ]
    for seed in (0, 1, 2):
        grpo_a = model_result(counts(A_GRPO_ADD[seed], [0, 0]), seconds=10.0 * (seed + 1))
        cells.append(cell("GRPO n=8", seed, {"tiny-a": grpo_a}))
        cells.append(cell("GRPO n=8", seed, {"tiny-b": model_result(B_COUNTS)}))
        graft_a = model_result(counts([4, 4], A_GRAFT_SUB[seed]), seconds=40.0)
        graft = {"tiny-a": graft_a, "tiny-b": model_result(B_COUNTS, seconds=40.0)}
        cells.append(cell("GRAFT", seed, graft, seconds=60.0))
    return cells


def row(rows, model, label):
    return next(r for r in rows if r["model"] == model and r["label"] == label)


def test_table_means_stds_and_deltas_vs_the_baseline():
    rows = table_rows(cell_records(results()), "GRPO n=8", ["GRPO n=8", "GRAFT"])
    order = [(r["model"], r["label"]) for r in rows]
    assert order == [(m, label) for m in PAIR for label in ("base", "GRPO n=8", "GRAFT")]
    grpo, graft = row(rows, "tiny-a", "GRPO n=8"), row(rows, "tiny-a", "GRAFT")
    # addition 0.25 / 0.5 / 0.75: mean 0.5, sample std 0.25; the average is half of it
    assert grpo["procedural/addition"] == pytest.approx(0.5)
    assert grpo["procedural/addition_std"] == pytest.approx(0.25)
    assert (grpo["average"], grpo["average_std"], grpo["average_n"]) == pytest.approx(
        (0.25, 0.125, 3)
    )
    # GRAFT: addition 1.0 always, subtraction 0 / 0.25 / 0.5 -> average 0.5 / 0.625 / 0.75
    assert (graft["average"], graft["average_std"]) == pytest.approx((0.625, 0.125))
    assert graft["average_delta"] == pytest.approx(0.375)
    assert graft["procedural/addition_delta"] == pytest.approx(0.5)
    assert graft["procedural/subtraction_delta"] == pytest.approx(0.25)
    assert grpo["average_delta"] == 0.0
    base = row(rows, "tiny-a", "base")
    assert (base["average"], base["average_std"], base["average_n"]) == (0.25, 0.0, 1)
    assert base["average_delta"] == pytest.approx(0.0)
    assert row(rows, "tiny-b", "GRAFT")["average_delta"] == pytest.approx(0.0)


def test_weak_skill_pass_and_rescue_share():
    rows = table_rows(cell_records(results()), "GRPO n=8")
    # tiny-a's weak skill is subtraction (tiny-b's own)
    grpo, graft = row(rows, "tiny-a", "GRPO n=8"), row(rows, "tiny-a", "GRAFT")
    assert (grpo["weak_skills"], grpo["weak_skills_std"]) == (0.0, 0.0)
    assert (graft["weak_skills"], graft["weak_skills_std"]) == pytest.approx((0.25, 0.25))
    # tiny-a GRPO all-fail problems: seed 0 addition/1 and both subtraction problems, of
    # which tiny-b solves the two subtraction ones: 2/3; seeds 1, 2: both subtraction: 1
    assert grpo["rescue"] == pytest.approx(8 / 9)
    assert grpo["rescue_std"] == pytest.approx((1 / 27) ** 0.5)
    assert (graft["rescue"], graft["rescue_std"]) == pytest.approx((1.0, 0.0))
    # tiny-b fails both addition problems; tiny-a solves 1 of 2, 2 of 2, 2 of 2
    tiny_b = row(rows, "tiny-b", "GRPO n=8")
    assert (tiny_b["rescue"], tiny_b["rescue_std"]) == pytest.approx((5 / 6, (1 / 12) ** 0.5))
    assert row(rows, "tiny-b", "base")["rescue"] == pytest.approx(1.0)


def test_compute_table_means_over_seeds():
    rows = compute_rows(cell_records(results()), ["GRPO n=8", "GRAFT"])
    assert [(r["model"], r["label"]) for r in rows] == [
        (m, label) for m in PAIR for label in ("GRPO n=8", "GRAFT")
    ]
    grpo, graft = rows[0], rows[1]
    assert grpo["train_seconds_to_checkpoint"] == pytest.approx(20.0)
    assert (grpo["rollouts_to_checkpoint"], grpo["cell_rollouts_to_checkpoint"]) == (16, 16)
    assert (graft["rollouts_to_checkpoint"], graft["cell_rollouts_to_checkpoint"]) == (16, 32)
    assert (graft["cell_seconds"], graft["seeds"]) == (60.0, 3)


def test_reports_are_written_with_the_table_and_provenance(tmp_path):
    paths = write_reports(results(), tmp_path, "GRPO n=8", ["GRPO n=8", "GRAFT"])
    assert sorted(p.name for p in paths) == ["compute.csv", "table.csv", "table.json", "table.md"]
    markdown = (tmp_path / "table.md").read_text()
    assert "| tiny-a (tiny-b) | GRAFT | 3 | 100.0 ± 0.0 | 25.0 ± 25.0 | 62.5 ± 12.5 | +37.5 |" in (
        markdown
    )
    document = json.loads((tmp_path / "table.json").read_text())
    assert document["sets"] == list(SETS)
    assert document["provenance"]["cell_commits"] == [PROVENANCE]
    assert document["provenance"]["cell_kernels"] == ["not recorded"]  # fixtures record none
    assert document["provenance"]["machine"]["torch_cpu_capability"]  # where the report ran
    assert "versions" in document["provenance"] and "git_commit" in document["provenance"]
    csv_lines = (tmp_path / "table.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 6


def test_provenance_lists_each_kernel_path_the_cells_ran_on():
    machines = [None, {"cpu": "EPYC", "torch_cpu_capability": "AVX512"}]
    machines += [{"cpu": "EPYC", "torch_cpu_capability": "AVX2"}] * 2
    found = [
        {"provenance": {**PROVENANCE, **({} if m is None else {"machine": m})}} for m in machines
    ]
    kernels = provenance_summary(found)["cell_kernels"]
    assert kernels == ["EPYC (AVX2)", "EPYC (AVX512)", "not recorded"]


def test_complementarity_counts_the_peers_solutions_of_all_fail_prompts():
    mine = {
        "train_counts": [{"step": 0, "prompt_ids": ["p1", "p2", "p3", "p4"], "k": [0, 0, 1, 0]}]
    }
    mine["train_counts"].append({"step": 1, "prompt_ids": ["p5"], "k": [2]})
    theirs = {
        "train_counts": [{"step": 0, "prompt_ids": ["p4", "p3", "p2", "p1"], "k": [8, 0, 0, 3]}]
    }
    theirs["train_counts"].append({"step": 1, "prompt_ids": ["p5"], "k": [0]})
    # all-fail p1, p2, p4; the peer solved p1 and p4; step 1 has no all-fail prompt
    assert complementarity(mine, theirs) == {0: pytest.approx(2 / 3)}


def test_bands_keep_the_steps_every_seed_has():
    curve = band([{0: 0.5, 1: 0.2}, {0: 0.7, 2: 0.1}])
    assert curve["step"] == [0]
    assert curve["mean"] == pytest.approx([0.6])
    assert curve["std"] == pytest.approx([0.02**0.5])


def curve_records() -> list[dict]:
    made = results()
    for result in made[2:]:
        seed = result["seed"]
        for agent, model in result["models"].items():
            model["curves"] = {
                "step": [0, 1],
                "reward_mean": [0.1 * seed, 0.2],
                "eval_step": [1, 2],
                "eval_average": [0.3, 0.4 + 0.01 * seed],
            }
            k = [0, 3] if agent == "tiny-a" else [2, 0]
            model["train_counts"] = [
                {"step": step, "prompt_ids": ["p", "q"], "k": k} for step in (0, 1)
            ]
    return cell_records(made)


def test_curves_and_plots_are_written_as_png(tmp_path):
    records = curve_records()
    reward = learning_curves(records, "reward_mean")[("tiny-a", "tiny-a+tiny-b", "GRPO n=8")]
    assert reward["mean"] == pytest.approx([0.1, 0.2]) and reward["std"] == pytest.approx([0.1, 0])
    paths = write_plots(records, tmp_path, ["GRPO n=8", "GRAFT"], {"GRPO n=8", "GRAFT"})
    names = sorted(p.name for p in paths)
    assert names == ["complementarity.png", "curves.json", "eval_average.png", "reward_mean.png"]
    for path in paths:
        if path.suffix == ".png":
            data = path.read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    curves = json.loads((tmp_path / "curves.json").read_text())
    shares = {(c["model"], c["label"]): c["mean"] for c in curves["complementarity"]}
    # tiny-a fails p (k = 0) where tiny-b has k = 2; tiny-b fails q, tiny-a has k = 3
    assert shares == {(m, label): [1.0, 1.0] for m in PAIR for label in ("GRPO n=8", "GRAFT")}


def test_arm_styles_stay_distinct_beyond_the_ten_colours():
    labels = [f"arm {i}" for i in range(40)]
    styles = arm_styles(labels)
    looks = {(s["color"], s["linestyle"], s["marker"]) for s in styles.values()}
    assert len(looks) == 40 and list(styles) == labels
