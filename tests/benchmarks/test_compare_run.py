"""`graft compare` end to end on the tiny pair: 1-step cells run, write results and reports,
and a second invocation skips them without retraining; an interrupted cell resumes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from run_configs import SMALLEST_GRID

from benchmarks.cli import main

# the smallest real grid with longer responses, two eval sets, the best checkpoint and
# periodic evaluation
GRID = {
    **SMALLEST_GRID,
    "base": {**SMALLEST_GRID["base"], "sampling": {"max_new_tokens": 24}},
    "eval": {
        "sets": ["procedural/addition", "procedural/subtraction"],
        "procedural": {"difficulty": 1},
        "limit": 3,
        "k": 2,
        "max_new_tokens": 24,
        "checkpoint": "best",
    },
    "periodic_eval": {"every": 1, "limit": 2, "k": 1},
}
CELLS = ("grpo-n-2/tiny-a/seed0", "grpo-n-2/tiny-b/seed0", "graft/tiny-a+tiny-b/seed0")


def snapshot(out: Path) -> dict[str, int | str]:
    """What a cell's training wrote: modification times of checkpoints and trajectories,
    and the content of the files a resumed Trainer rewrites unchanged (metrics, store meta).
    """
    state: dict[str, int | str] = {}
    for path in sorted((out / "cells").rglob("*")):
        if path.is_file() and "/run/" in str(path):
            rewritten = path.name in ("metrics.jsonl", "_meta.json")
            state[str(path)] = path.read_text() if rewritten else path.stat().st_mtime_ns
    return state


def test_compare_runs_cells_then_skips_them_and_resumes_an_interrupted_one(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    out = tmp_path / "out"
    assert main(["compare", "--config", str(grid), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "| tiny-a (tiny-b) | GRAFT | 1 |" in printed.out
    for name in ("table.md", "table.json", "compute.csv", "curves.json", "eval_average.png"):
        assert (out / name).is_file(), name
    results = {c: json.loads((out / "cells" / c / "result.json").read_text()) for c in CELLS}
    graft = results[CELLS[2]]
    assert graft["seed"] == 0 and graft["config"]["algorithm"] == "graft"
    assert graft["provenance"]["git_commit"] and graft["provenance"]["versions"]["torch"]
    assert set(graft["timings"]) == {"resumed_at", "train_seconds", "eval_seconds", "cell_seconds"}
    assert graft["timings"]["resumed_at"] == 0
    model = graft["models"]["tiny-b"]
    assert model["checkpoint"] == f"cells/{CELLS[2]}/run/best/tiny-b"  # relative to --out
    assert graft["config"]["run_dir"] == f"cells/{CELLS[2]}/run" and model["checkpoint_steps"] == 1
    assert model["rollouts_to_checkpoint"] == 3 * 2
    assert len(model["eval"]["benchmarks"]["procedural/addition"]["successes"][0]) == 3
    assert model["curves"]["eval_step"] == [1] and len(model["train_counts"]) == 1
    assert (out / "cells" / CELLS[2] / "eval" / "tiny-b" / "samples.jsonl").is_file()

    trained = snapshot(out)
    assert any(path.endswith("metrics.jsonl") for path in trained)
    assert main(["compare", "--config", str(grid), "--out", str(out)]) == 0
    assert capsys.readouterr().err.count("finished earlier, skipped") == len(CELLS)
    assert snapshot(out) == trained
    assert json.loads((out / "cells" / CELLS[2] / "result.json").read_text()) == graft

    # an interrupted cell (trained, not evaluated) resumes from its checkpoint: no new step
    (out / "cells" / CELLS[2] / "result.json").unlink()
    assert main(["compare", "--config", str(grid), "--out", str(out)]) == 0
    assert capsys.readouterr().err.count("finished earlier, skipped") == 2
    assert snapshot(out) == trained
    again = json.loads((out / "cells" / CELLS[2] / "result.json").read_text())
    assert again["timings"]["resumed_at"] == 1
    assert again["models"]["tiny-b"]["eval"]["summary"] == model["eval"]["summary"]

    # another config in the same folder is refused, naming the stale cells
    changed = ["--set", "train.steps=2"]
    assert main(["compare", "--config", str(grid), "--out", str(out), *changed]) == 2
    error = capsys.readouterr().err
    assert "cells run with another config" in error and all(c in error for c in CELLS)
    assert snapshot(out) == trained
