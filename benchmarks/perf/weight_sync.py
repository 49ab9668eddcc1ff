"""Seconds of the vLLM backend's weight sync against one memory copy of the same weights.

One `VLLMPolicy` per model. Each round first writes every parameter in place (as an
optimizer step does, so the sync sends everything but tied copies), then times
`sync_weights` and, alternating with it so load spikes hit both alike, one memory copy
of the trainer's state dict two ways: `clone` of every tensor (the reference of the
target, allocation included) and `copy_` into tensors allocated once (bandwidth only, a
lower bound). The first sync, which lays out and maps the staging buffer, is not timed.
Reports the median and range of each and of the sync's ratio to each per round. Needs
vLLM (see `.ci/vllm`); run it as

    python -m benchmarks.perf.weight_sync [--models tiny-a smollm2-135m] [--rounds 5]
        [--json FILE]

(a model is a zoo name or a model directory).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from graft_env.policies import load_policy


def _seconds(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": float(np.median(values)), "min": min(values), "max": max(values)}


def measure(model: str, rounds: int) -> dict:
    policy = load_policy(model, rollout_backend="vllm")
    try:
        state = policy.model.state_dict()
        policy.sync_weights()
        into = {name: torch.empty_like(tensor) for name, tensor in state.items()}
        syncs, copies, copies_into, counts = [], [], [], set()
        for _ in range(rounds):
            with torch.no_grad():
                for parameter in policy.model.parameters():
                    parameter.mul_(1.0 + 1e-6)  # a full update: every version counter moves
            syncs.append(_seconds(lambda: counts.add(policy.sync_weights())))
            copies.append(_seconds(lambda: {k: v.clone() for k, v in state.items()}))
            copies_into.append(_seconds(lambda: [into[k].copy_(v) for k, v in state.items()]))
    finally:
        policy.close()
    [(sent, skipped)] = counts
    return {
        "model": model,
        "megabytes": sum(t.numel() * t.element_size() for t in state.values()) / 1e6,
        "tensors_sent": sent,
        "tensors_skipped": skipped,
        "sync_s": _spread(syncs),
        "copy_s": _spread(copies),
        "copy_into_s": _spread(copies_into),
        "sync_over_copy": _spread([s / c for s, c in zip(syncs, copies, strict=True)]),
        "sync_over_copy_into": _spread([s / c for s, c in zip(syncs, copies_into, strict=True)]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny-a"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    results = [measure(model, args.rounds) for model in args.models]

    def spread(row: dict, key: str, digits: int) -> str:
        s = row[key]
        return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"

    columns = ("sync s", "clone s", "copy_ s", "sync / clone", "sync / copy_")
    print(f"{'model':<24}{'MB':>8}{'sent/skip':>11}  " + "".join(f"{c:<22}" for c in columns))
    for row in results:
        print(
            f"{row['model']:<24}{row['megabytes']:>8.1f}"
            f"{row['tensors_sent']:>6}/{row['tensors_skipped']:<4}  "
            f"{spread(row, 'sync_s', 3):<22}{spread(row, 'copy_s', 3):<22}"
            f"{spread(row, 'copy_into_s', 3):<22}{spread(row, 'sync_over_copy', 2):<22}"
            f"{spread(row, 'sync_over_copy_into', 2)}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":  # vLLM starts its engine processes with spawn
    main()
