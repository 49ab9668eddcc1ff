"""`graft plot RUN_DIR`: one run's learning curves and exchange funnel, from hand-made
metrics rows (two agents, four steps, evaluated before training and after steps 1 and 3)."""

from __future__ import annotations

import json

import pytest

from benchmarks import cli
from benchmarks.commands.plot import funnel_series, held_out, write_plots

PNG = b"\x89PNG\r\n\x1a\n"


def rows() -> list[dict]:
    made = []
    for step in range(4):
        for agent, peer in (("a", "b"), ("b", "a")):
            row = {"step": step, "agent": agent, "reward_mean": 0.1 * step, "all_fail_share": 0.5}
            prefix = f"exchange/{peer}->{agent}"
            row |= {f"{prefix}/candidates": 4.0, f"{prefix}/prompts": 2.0}
            row |= {f"{prefix}/transferred": 8.0, f"{prefix}/admitted": 5.0 - step}
            if step:  # nothing scored at step 0
                row[f"{prefix}/mean_s"] = -0.5
            if step == 0:
                row["eval_start/average/pass@1"] = 0.25
            if step % 2:
                row["eval/average/pass@1"] = 0.25 + 0.1 * step
            made.append(row)
    return made


def write(run_dir, made) -> None:
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in made))


def test_held_out_starts_before_training_and_counts_updates():
    assert held_out(rows(), "a") == ([0, 2, 4], [0.25, pytest.approx(0.35), pytest.approx(0.55)])


def test_the_funnel_is_read_per_receiving_direction():
    funnel = funnel_series(rows())
    assert sorted(funnel) == ["a->b", "b->a"]
    # no gate count logged: the gate's stage is the direction's candidates
    assert funnel["b->a"]["gate_candidates"] == ([0, 1, 2, 3], [4.0] * 4)
    assert funnel["b->a"]["admitted"] == ([0, 1, 2, 3], [5.0, 4.0, 3.0, 2.0])
    assert funnel["b->a"]["mean_s"] == ([1, 2, 3], [-0.5] * 3)


def test_graft_plot_writes_both_figures(tmp_path, capsys):
    write(tmp_path / "run", rows())
    assert cli.main(["plot", str(tmp_path / "run")]) == 0
    plots = tmp_path / "run" / "plots"
    for name in ("learning_curves.png", "exchange_funnel.png"):
        assert (plots / name).read_bytes()[:8] == PNG
    assert str(plots / "exchange_funnel.png") in capsys.readouterr().out


def test_a_run_without_exchange_gets_learning_curves_only(tmp_path):
    plain = [{k: v for k, v in r.items() if not k.startswith("exchange/")} for r in rows()]
    write(tmp_path / "run", plain)
    paths = write_plots(tmp_path / "run", tmp_path / "out")
    assert [p.name for p in paths] == ["learning_curves.png"]


def test_a_directory_without_metrics_is_one_line(tmp_path, capsys):
    assert cli.main(["plot", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert (
        error
        == f"graft plot: error: {tmp_path}: no metrics.jsonl there (is it a graft train run_dir?)"
    )
