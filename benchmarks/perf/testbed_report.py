"""The exchange funnel of one GRAFT step on a pair's untrained models (issue 16).

How much of what one model can teach the other reaches the other's update: one
step of the real loop (`Trainer.run_step` with `algorithms.make("graft")`) on a
fresh batch of procedural "train" prompts at the pair's levels, then per
direction S -> R, as shares of the batch:

- gate candidates: prompts where R fails all n and S succeeds 1..n-1 times (Eq.4);
- kept by balancing: the prompts actually transferred (both directions cut to the
  smaller one);
- kept by the floor: transferred responses with s > delta, as a share of the
  batch's n x prompts responses and of the transferred ones;
- peer share of R's update: peer responses among all responses of R's batch
  with a non-zero weighted advantage (what moves R's weights at all).

    python -m benchmarks.perf.testbed_report [--models testbed-a testbed-b] [--prompts 64] [--n 8]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path

from algorithms.training.loop import StepRecord, Trainer
from benchmarks.perf.common import procedural_run
from graft_env.data.procedural import LEVELS
from graft_env.policies.tiny.config import TESTBED, pair_of


def pair_levels(models: list[str]) -> list[int]:
    """The levels a built-in pair was warm-started on (testbed levels for paths)."""
    config = pair_of(models[0]) or TESTBED
    return [level for level, weight in zip(LEVELS, config.level_weights, strict=True) if weight]


def _skill(prompt_id: str) -> str:
    return prompt_id.split("/")[2]  # procedural/<split>/<skill>/<seed>/<index>


def _skill_means(prompt_ids: list[str], values) -> dict[str, float]:
    by_skill: dict[str, list[float]] = {}
    for prompt_id, value in zip(prompt_ids, values, strict=True):
        by_skill.setdefault(_skill(prompt_id), []).append(float(value))
    return {skill: sum(v) / len(v) for skill, v in sorted(by_skill.items())}


def funnel(record: StepRecord, stats, prompts: int, n: int) -> dict[str, dict[str, float]]:
    """Per direction "S->R": the funnel counts and their shares of the batch."""
    out = {}
    for (source, receiver), direction in stats.directions.items():
        batch = record.batches[receiver].sequences
        moving = [s for s in batch if s.advantage * s.weight != 0]
        peer = sum(s.is_peer for s in moving)
        ids = record.rollouts[receiver].prompt_ids
        kept_by_skill = Counter(_skill(ids[p]) for p in direction.selected_prompts)
        out[f"{source}->{receiver}"] = {
            "gate_candidates": direction.gate_candidates,
            "prompts_kept": len(direction.selected_prompts),
            "responses_transferred": direction.transferred,
            "responses_admitted": direction.admitted,
            "gate_candidate_share": direction.gate_candidates / prompts,
            "kept_prompt_share": len(direction.selected_prompts) / prompts,
            "admitted_response_share": direction.admitted / (prompts * n),
            "floor_pass_share": direction.admitted / direction.transferred
            if direction.transferred
            else None,
            "peer_share_of_update": peer / len(moving) if moving else None,
            "kept_prompts_by_skill": dict(sorted(kept_by_skill.items())),
        }
    return out


def measure(
    models: list[str],
    *,
    prompts: int = 64,
    n: int = 8,
    seed: int = 0,
    max_new_tokens: int = 128,
    levels: list[int] | None = None,
) -> dict:
    """One GRAFT step of `models` (built-in names or model directories); the funnel."""
    levels = levels or pair_levels(models)
    with tempfile.TemporaryDirectory() as run_dir:
        config = procedural_run(
            [{"name": Path(m).name, "model": m} for m in models],
            "graft",
            Path(run_dir),
            steps=1,
            batch_size=prompts,
            n=n,
            max_new_tokens=max_new_tokens,
            dataset_options={"size": max(500, prompts), "difficulty": levels},
            seed=seed,
        )
        trainer = Trainer(config)
        record = trainer.run_step()
    return {
        "models": models,
        "batch_pass_at_1": {
            name: _skill_means(rollouts.prompt_ids, rollouts.rewards.mean(axis=1))
            for name, rollouts in record.rollouts.items()
        },
        "prompts": prompts,
        "n": n,
        "seed": seed,
        "levels": levels,
        "delta": trainer.algorithm.config.delta,
        "directions": funnel(record, record.exchange_stats, prompts, n),
    }


def format_funnel(result: dict) -> str:
    lines = [
        f"one GRAFT step, {result['prompts']} prompts x n={result['n']}, levels "
        f"{result['levels']}, delta {result['delta']}: shares of the batch",
        f"{'direction':<26}{'candidates':>12}{'kept':>8}{'admitted':>10}"
        f"{'floor pass':>12}{'peer share of update':>22}",
    ]
    for name, d in result["directions"].items():
        floor = "n/a" if d["floor_pass_share"] is None else f"{d['floor_pass_share']:.1%}"
        update = "n/a" if d["peer_share_of_update"] is None else f"{d['peer_share_of_update']:.1%}"
        lines.append(
            f"{name:<26}{d['gate_candidate_share']:>12.1%}{d['kept_prompt_share']:>8.1%}"
            f"{d['admitted_response_share']:>10.1%}{floor:>12}{update:>22}"
        )
        kept = ", ".join(f"{skill} {count}" for skill, count in d["kept_prompts_by_skill"].items())
        lines.append(f"{'':<4}kept prompts by skill: {kept or 'none'}")
    for name, skills in result["batch_pass_at_1"].items():
        shown = ", ".join(f"{skill} {value:.0%}" for skill, value in skills.items())
        lines.append(f"{name} pass@1 on this batch: {shown}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs=2, default=["testbed-a", "testbed-b"])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--levels", type=int, nargs="+", default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON")
    args = parser.parse_args(argv)
    result = measure(
        args.models,
        prompts=args.prompts,
        n=args.n,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        levels=args.levels,
    )
    print(format_funnel(result))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
