"""The exchange funnel of a built pair before a study runs: what the first GRAFT steps carry.

    python -m benchmarks.study.probe --pair gap-d0 --seed 0 --steps 3 [--out probe.json]

Runs the first `--steps` steps of a run (`--config`, default the gap study's base run
config, with the pair's members as its agents) through the real loop (`Trainer.run_step`:
rollout, verify, `algorithms.make(...)`'s exchange and batches, and the update), and
reports per step and direction (source -> receiver) the funnel a study's effect depends
on: the receiver's all-fail and all-pass shares, the gate's candidates (Eq.4), the
prompts kept after balancing, the transferred responses passing the compatibility floor
(admitted / transferred) and their mean compatibility score s, and the peer's share of
the receiver's informative responses (non-zero advantage, non-zero weight, in the policy
gradient), by count and by weight x |advantage| (what the compatibility weights leave).
It judges the pre-registration's thresholds T1-T3 per direction (`thresholds`).
Step 0 is the untrained pair; later steps follow updates exactly as a study cell's first
steps do. The step seconds are measured too (the study's compute estimate).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from algorithms.storage.yaml_schema import read_yaml_mapping
from algorithms.training.run_config import config_from_dict
from algorithms.training.step import StepRecord
from graft_env.types import TrainSequence

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "gap_pair_graft.yaml"


def direction_funnel(record: StepRecord, source: str, receiver: str) -> dict[str, float]:
    """One step's funnel for the transfers from `source` to `receiver`."""
    own = record.rollouts[receiver].rewards
    d = record.exchange_stats.directions.get((source, receiver))
    informative = [
        s
        for s in record.batches[receiver].sequences
        if s.advantage != 0 and s.weight > 0 and s.policy_gradient
    ]
    peer = sum(s.is_peer for s in informative)
    transferred = d.transferred if d is not None else 0
    return {
        "receiver_all_fail": float((own.sum(axis=1) == 0).mean()),
        "receiver_all_pass": float((own.sum(axis=1) == own.shape[1]).mean()),
        "gate_candidates": float(d.gate_candidates or 0) if d is not None else 0.0,
        "candidates": float(d.candidates) if d is not None else 0.0,
        "kept": float(len(d.selected_prompts)) if d is not None else 0.0,
        "transferred": float(transferred),
        "admitted": float(d.admitted) if d is not None else 0.0,
        "floor_pass": float(d.admitted / transferred) if transferred else float("nan"),
        "mean_s": float(np.mean(d.scores)) if d is not None and d.scores else float("nan"),
        "informative": float(len(informative)),
        "peer_share": float(peer / len(informative)) if informative else float("nan"),
        "peer_weight_share": _weight_share(informative),
    }


def _weight_share(sequences: Sequence[TrainSequence]) -> float:
    """The peer's share of sum(weight x |advantage|) over `sequences` (NaN when it is 0)."""
    mass = [s.weight * abs(s.advantage) for s in sequences]
    peer = sum(m for m, s in zip(mass, sequences, strict=True) if s.is_peer)
    return float(peer / sum(mass)) if sum(mass) > 0 else float("nan")


def step_funnel(record: StepRecord) -> dict[str, object]:
    """Every direction's funnel of one step, and its phase seconds."""
    agents = list(record.batches)
    return {
        "step": record.step,
        "seconds": float(sum(record.timings.values())),
        "timings": {k: float(v) for k, v in record.timings.items()},
        "directions": {
            f"{source}->{receiver}": direction_funnel(record, source, receiver)
            for receiver in agents
            for source in agents
            if source != receiver
        },
    }


def summarise(steps: Sequence[Mapping[str, object]]) -> dict[str, dict[str, float]]:
    """Per direction, the mean of every funnel field over the steps (NaN fields skipped)."""
    names = list(steps[0]["directions"])
    return {
        name: {
            field: float(np.nanmean(values)) if not np.all(np.isnan(values)) else float("nan")
            for field in steps[0]["directions"][name]
            for values in [np.array([s["directions"][name][field] for s in steps])]
        }
        for name in names
    }


THRESHOLDS = {"T1": 3.0, "T2": 0.5, "T3": 0.5}
"""The pre-registration's build thresholds (docs/study/GAP-PREREGISTRATION.md, section 1),
judged on the means over the probe's steps in each direction."""


def thresholds(mean: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, bool | None]]:
    """Per direction `source->receiver`: T1 gate candidates >= 3 per step; T2 floor pass >= 50 %
    (None when nothing was transferred); T3 the peer's all-pass share <= 50 % (the reverse
    direction's `receiver_all_pass`). A build meets them if every value is True."""
    judged: dict[str, dict[str, bool | None]] = {}
    for name, row in mean.items():
        source, receiver = name.split("->")
        floor = row["floor_pass"]
        judged[name] = {
            "T1": row["gate_candidates"] >= THRESHOLDS["T1"],
            "T2": None if np.isnan(floor) else floor >= THRESHOLDS["T2"],
            "T3": mean[f"{receiver}->{source}"]["receiver_all_pass"] <= THRESHOLDS["T3"],
        }
    return judged


def probe_config(
    base: Mapping[str, object], models: Mapping[str, str], seed: int, steps: int, run_dir: Path
) -> dict[str, object]:
    """The run config of the probe: `base` with `models` (agent name -> model path) as its
    agents in order (each keeping the options of the base agent in its place), no
    trajectory store, no evaluation."""
    agents = list(base["agents"])
    if len(agents) != len(models):
        raise ValueError(f"config has {len(agents)} agents, the pair {len(models)} models")
    return {
        **base,
        "agents": [
            {**agent, "name": name, "model": str(path)}
            for agent, (name, path) in zip(agents, models.items(), strict=True)
        ],
        "seed": seed,
        "steps": steps,
        "run_dir": str(run_dir),
        "store_trajectories": False,
        "tensorboard": False,
        "eval": {"every": 0},
    }


def probe(
    pair: str,
    *,
    seed: int = 0,
    steps: int = 3,
    config: Path = DEFAULT_CONFIG,
    algorithm: str | None = None,
    cache_dir: Path | None = None,
    threads: int = 1,
    overrides: Sequence[str] = (),
    on_step: Callable[[StepRecord], None] | None = None,
) -> dict[str, object]:
    """Build (or load) pair `pair` (a `PAIRS` name, build seed 0) and run the probe;
    `overrides` are `key=value` changes of the run config (as `graft train --set`);
    `on_step` sees every step's record."""
    from algorithms.training.loop import Trainer
    from graft_env.policies import load_policy
    from graft_env.policies.tiny.build import build_tiny_pair
    from graft_env.policies.tiny.config import PAIRS
    from graft_env.threads import torch_threads

    if pair not in PAIRS:
        raise ValueError(f"--pair {pair!r}: unknown pair; valid: {list(PAIRS)}")
    if steps < 1:
        raise ValueError(f"--steps must be >= 1, got {steps}")
    base = read_yaml_mapping(config)
    if algorithm is not None:
        base["algorithm"] = algorithm
    names = {spec.name: spec.name for spec in PAIRS[pair].models}
    with torch_threads(threads), tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / "run"
        config_from_dict(probe_config(base, names, seed, steps, run_dir), overrides)  # first
        paths = build_tiny_pair(cache_dir, 0, config=PAIRS[pair], workers=0, threads=threads)
        run = config_from_dict(probe_config(base, paths, seed, steps, run_dir), overrides)
        policies = {a.name: load_policy(a.model, **dict(a.options)) for a in run.agents}
        trainer = Trainer(run, policies)
        records = []
        for _ in range(steps):
            record = trainer.run_step()
            if on_step is not None:
                on_step(record)
            records.append(step_funnel(record))
    mean = summarise(records)
    return {
        "pair": pair,
        "models": {name: str(path) for name, path in paths.items()},
        "algorithm": run.algorithm,
        "seed": seed,
        "steps": records,
        "mean": mean,
        "thresholds": thresholds(mean),
    }


def format_probe(result: Mapping[str, object]) -> str:
    """A plain-text table: one row per direction, the funnel's means over the steps."""
    fields = ("receiver_all_fail", "receiver_all_pass", "gate_candidates", "kept")
    fields += ("floor_pass", "mean_s", "peer_share", "peer_weight_share")
    header = f"{'direction':<22}" + "".join(f"{f:>18}" for f in fields)
    lines = [
        f"{result['pair']} ({result['algorithm']}, seed {result['seed']}, "
        f"{len(result['steps'])} steps; means per step)",
        header,
    ]
    for name, row in result["mean"].items():
        lines.append(f"{name:<22}" + "".join(f"{row[f]:>18.3f}" for f in fields))
    for name, judged in result["thresholds"].items():
        verdicts = ", ".join(
            f"{t} {'n/a' if ok is None else 'pass' if ok else 'FAIL'}" for t, ok in judged.items()
        )
        lines.append(f"thresholds {name}: {verdicts}")
    seconds = [s["seconds"] for s in result["steps"]]
    lines.append(f"step seconds: {', '.join(f'{s:.1f}' for s in seconds)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", required=True, help="a built-in pair (PAIRS), e.g. gap-d0")
    parser.add_argument("--seed", type=int, default=0, help="the run seed (prompts, samples)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="base run config")
    parser.add_argument("--algorithm", default=None, help="registry name (default: config's)")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON")
    args = parser.parse_args(argv)
    result = probe(
        args.pair,
        seed=args.seed,
        steps=args.steps,
        config=args.config,
        algorithm=args.algorithm,
        cache_dir=args.cache_dir,
        threads=args.threads,
        overrides=args.set,
    )
    print(format_probe(result))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
