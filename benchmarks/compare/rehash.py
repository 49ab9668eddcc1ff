"""Move finished cells to the read-options hash rule, verifying each under the old rule first.

The cell hash once covered every field of every registered strategy (`dataclasses.asdict` of
the resolved config), so adding any option anywhere made every finished cell stale. It now
covers the options the cell's algorithm and strategy read (`options_read`). A finished cell
is moved only if its recorded hash is the one the old rule gives for the cell planned now
(same run config, evaluation plan, models and sources); it then gets the new hash, and its
paths under the grid's output are recorded relative to it (`portable_result`). A cell that
fails the check is left as it is and listed. The models' identities are the recorded build
digests (`--weights`: a gap report's results.json, `provenance.pairs.*.members.*`), so the
check needs no build.

    python -m benchmarks.compare.rehash --out docs/results/gap --weights \\
        docs/results/gap/part3/results.json configs/grids/gap.yaml configs/grids/gap-n32.yaml \\
        configs/grids/gap-controls.yaml
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import algorithms
from benchmarks.compare.cells import (
    RESULT_FILE,
    UNBUILT,
    Cell,
    model_identity,
    payload_hash,
    plan_cells,
    portable_result,
)
from benchmarks.compare.grid import GridSpec, load_grid


def recorded_identities(results: Mapping[str, Any], grids: Sequence[GridSpec]) -> dict[str, str]:
    """model -> its `model_identity` with the weights digest a report recorded for it."""
    digests = {
        model: member["weights_sha256"]
        for pair in results["provenance"]["pairs"].values()
        for model, member in pair["members"].items()
    }
    found = {}
    for grid in grids:
        for pair in grid.pairs:
            for model in pair.models:
                unbuilt = model_identity(model, {})
                if not unbuilt.endswith(f"@{UNBUILT}") or digests.get(model, UNBUILT) == UNBUILT:
                    continue
                found[model] = unbuilt.removesuffix(UNBUILT) + digests[model]
    return found


def old_rule_hash(cell: Cell, old: Mapping[str, str]) -> str:
    """The cell's hash under the all-options rule; `old` holds its sources' old hashes."""
    payload = copy.deepcopy(dict(cell.hash_inputs))
    if cell.config is not None:
        resolved = algorithms.configure(cell.config.algorithm, **cell.config.algorithm_options)
        payload["train"]["resolved_algorithm"] = dataclasses.asdict(resolved)
    if payload.get("stored_peer"):
        payload["stored_peer"][1] = old[payload["stored_peer"][0]]
    for source in payload.get("library", []):
        source[1] = old[source[0]]
    return payload_hash(payload)


def recorded_out(result: Mapping[str, Any]) -> str:
    """The grid output a result was written under: its run_dir less ``/cells/<id>/run``
    (a base cell, which trains nothing, names none: '' then)."""
    run_dir = str((result.get("config") or {}).get("run_dir", ""))
    return run_dir.removesuffix(f"/cells/{result['cell']}/run") if run_dir else ""


def migrate(cells: Sequence[Cell], write: bool) -> dict[str, list[str]]:
    """Check and move every finished cell of `cells` (in plan order); what happened to each."""
    old: dict[str, str] = {}
    outcome: dict[str, list[str]] = {"moved": [], "current": [], "failed": [], "missing": []}
    for cell in cells:
        old[cell.cell_id] = old_rule_hash(cell, old)
        path = cell.directory / RESULT_FILE
        if not path.is_file():
            outcome["missing"].append(cell.cell_id)
            continue
        result = json.loads(path.read_text(encoding="utf-8"))
        if result["config_hash"] == cell.config_hash:
            outcome["current"].append(cell.cell_id)
        elif result["config_hash"] != old[cell.cell_id]:
            outcome["failed"].append(cell.cell_id)
            continue
        else:
            outcome["moved"].append(cell.cell_id)
        moved = portable_result({**result, "config_hash": cell.config_hash}, recorded_out(result))
        if write and moved != result:
            path.write_text(
                json.dumps(moved, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
            )
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("grids", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--weights", type=Path, required=True)
    parser.add_argument("--check", action="store_true", help="report only, write nothing")
    args = parser.parse_args(argv)
    grids = [load_grid(path) for path in args.grids]
    identities = recorded_identities(json.loads(args.weights.read_text()), grids)
    seen: dict[str, Cell] = {}
    for grid in grids:
        for cell in plan_cells(grid, args.out, identities=identities):
            seen.setdefault(cell.cell_id, cell)
    outcome = migrate(list(seen.values()), write=not args.check)
    print(json.dumps({k: len(v) for k, v in outcome.items()}), outcome["failed"] or "")
    return 1 if outcome["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
