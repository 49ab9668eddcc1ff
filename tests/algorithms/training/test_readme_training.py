"""The README's "Training from Python" block runs as written (names imported from the
package `algorithms.training`, so a later move of its modules cannot break it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def readme_block(after: str) -> str:
    """The first ```python block of the README after the line starting with `after`."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(after)
    return re.search(r"```python\n(.*?)```", text[start:], re.DOTALL)[1]


def test_the_readme_training_block_trains_and_writes_its_run(
    tiny_pair_paths, tmp_path, monkeypatch
):
    code = readme_block("Training from Python")
    assert "from algorithms.training import Trainer, load_config" in code
    run_dir = tmp_path / "demo"
    monkeypatch.chdir(REPO)
    exec(code.replace("runs/demo", str(run_dir)), {})
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sorted({(row["step"], row["agent"]) for row in rows}) == [
        (0, "tiny-a"),
        (0, "tiny-b"),
        (1, "tiny-a"),
        (1, "tiny-b"),
    ]
