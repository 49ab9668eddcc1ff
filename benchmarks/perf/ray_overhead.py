"""What the Ray backend costs over the local one on the same run, and what it sends.

1. Step time: the same config (tiny pair by default) trained with `backend: local`
   and `backend: ray` in alternating runs (local, ray, local, ...), so drift of a
   shared machine hits both alike. Step 0 of every run is warm-up and left out; the
   report gives medians of the other steps, the ratio ray / local, and the start-up
   (loading the policies; for Ray: starting the actors, the cluster itself apart).
2. Serialisation volume: one more Ray run, on the last timed Ray run's actors (no second
   start-up), with a `TrafficMeter` on every proxy counts the pickled bytes of every
   argument and result crossing an actor boundary, per method and per step (prompt
   formatting at start-up reported apart).
3. Rollout concurrency: the agents' `generate` one after the other (what the loop
   does today) against `generate_async` on all agents, then waiting (the loop change
   proposed in docs/scale-out.md).

    python -m benchmarks.perf.ray_overhead [--pairs 2] [--steps 3] [--models DIR_A DIR_B]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from algorithms.training.loop import Trainer, make_policies
from algorithms.training.ray import RayPolicy, TrafficMeter, parse_ray_options
from algorithms.training.ray.cluster import connect
from algorithms.training.run_config import TrainConfig
from benchmarks.perf.common import LOOP_PHASES, add_threads_option, procedural_run
from graft_env.policies import Policy, SamplingParams


def make_config(backend: str, run_dir: Path, args: argparse.Namespace) -> TrainConfig:
    agents = [
        {"name": Path(m).name, "model": m, "options": {"lr": 1e-4, "generation_batch_size": 64}}
        for m in args.models
    ]
    return procedural_run(
        agents,
        "graft",
        run_dir,
        steps=args.steps + 1,
        batch_size=args.batch_size,
        n=args.n,
        max_new_tokens=args.max_new_tokens,
        dataset_options={"size": 200},
        backend=backend,
        ray={"torch_threads": args.threads} if backend == "ray" else {},
    )


def _shutdown(policies: dict[str, Any]) -> None:
    """Free a Ray run's actors so the next run can be placed."""
    for policy in policies.values():
        if isinstance(policy, RayPolicy):
            policy.group.shutdown()
            return


def timed_run(config: TrainConfig) -> tuple[dict[str, Any], dict[str, Policy]]:
    """Start-up seconds and per-step phase seconds (step 0 dropped) of one fresh run, and
    its policies (still running, for `traffic_run`)."""
    started = time.perf_counter()
    policies = make_policies(config)
    startup = time.perf_counter() - started
    trainer = Trainer(config, policies=policies)
    trainer.open(resume=False)
    steps = []
    while trainer.step < config.steps:
        started = time.perf_counter()
        record = trainer.run_step()
        times = {phase: record.timings.get(phase, 0.0) for phase in LOOP_PHASES}
        times["step"] = time.perf_counter() - started
        steps.append(times)
    return {"startup": startup, "steps": steps[1:]}, policies


def traffic_run(
    config: TrainConfig, policies: dict[str, Policy], args: argparse.Namespace
) -> dict[str, Any]:
    """Bytes per method and step of a metered run of Ray `policies`, and the rollout
    concurrency test; shuts the policies down."""
    meters = {name: TrafficMeter() for name in policies}
    for name, policy in policies.items():
        policy.traffic = meters[name]
    trainer = Trainer(config, policies=policies)  # formats every dataset prompt
    setup_bytes = sum(m.total() for m in meters.values())
    trainer.open(resume=False)
    per_step: list[dict[str, dict[str, int]]] = []
    while trainer.step < config.steps:
        for name in policies:
            meters[name] = policies[name].traffic = TrafficMeter()
        trainer.run_step()
        step: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for meter in meters.values():
            for (method, direction), size in meter.bytes.items():
                step[method][direction] += size
            for method, calls in meter.calls.items():
                step[method]["calls"] += calls
        per_step.append(step)
    for policy in policies.values():
        policy.traffic = None
    concurrency = rollout_concurrency(trainer, args)
    _shutdown(policies)
    methods = sorted({m for step in per_step for m in step})
    mean = {
        method: {
            key: statistics.mean(step.get(method, {}).get(key, 0) for step in per_step)
            for key in ("calls", "sent", "received")
        }
        for method in methods
    }
    return {"setup_bytes": setup_bytes, "per_step_mean": mean, "concurrency": concurrency}


def rollout_concurrency(trainer: Trainer, args: argparse.Namespace) -> dict[str, float]:
    """Median seconds to sample one step's batch for every agent: in turn vs together."""
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, seed=123)
    batch = range(args.batch_size)
    prompts = {name: list(trainer.env.prompts_for(name, batch)) for name in trainer.policies}
    sequential, concurrent = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        for name, policy in trainer.policies.items():
            policy.generate(prompts[name], args.n, sampling)
        sequential.append(time.perf_counter() - started)
        started = time.perf_counter()
        pending = [
            policy.generate_async(prompts[name], args.n, sampling)
            for name, policy in trainer.policies.items()
        ]
        for call in pending:
            call.result()
        concurrent.append(time.perf_counter() - started)
    return {
        "sequential_s": statistics.median(sequential),
        "concurrent_s": statistics.median(concurrent),
    }


def _report(times: dict[str, list[dict[str, Any]]], traffic: dict[str, Any], cluster_s: float):
    steps = {b: [s for run in runs for s in run["steps"]] for b, runs in times.items()}
    count = len(steps["local"])
    print(f"\nmedian seconds per step ({count} steps each, step 0 of every run left out)")
    print(f"{'phase':<10}{'local':>10}{'ray':>10}{'ratio':>8}")
    summary: dict[str, Any] = {"cluster_start_s": cluster_s}
    for phase in (*LOOP_PHASES, "step"):
        local = statistics.median(s[phase] for s in steps["local"])
        ray = statistics.median(s[phase] for s in steps["ray"])
        ratio = ray / local if local > 0 else float("nan")
        summary[phase] = {"local": local, "ray": ray, "ratio": ratio}
        print(f"{phase:<10}{local:>10.3f}{ray:>10.3f}{ratio:>8.2f}")
    for backend, runs in times.items():
        startup = statistics.median(run["startup"] for run in runs)
        summary[f"startup_{backend}_s"] = startup
        print(f"start-up {backend}: {startup:.1f} s (median over runs)")
    print(f"Ray cluster start: {cluster_s:.1f} s (once)")
    print("\nbytes crossing actor boundaries per step (mean, all agents)")
    print(f"{'method':<15}{'calls':>7}{'sent':>12}{'received':>12}")
    for method, row in traffic["per_step_mean"].items():
        print(f"{method:<15}{row['calls']:>7.1f}{row['sent']:>12,.0f}{row['received']:>12,.0f}")
    total = sum(r["sent"] + r["received"] for r in traffic["per_step_mean"].values())
    print(f"{'total':<15}{'':>7}{total:>24,.0f}")
    print(f"start-up prompt formatting: {traffic['setup_bytes']:,} bytes")
    rollout = traffic["concurrency"]
    print(
        f"\nrollout of all agents: in turn {rollout['sequential_s']:.2f} s, "
        f"together (generate_async) {rollout['concurrent_s']:.2f} s"
    )
    summary.update(traffic_total_bytes_per_step=total, traffic=traffic)
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2, help="local/ray run pairs")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per run (+1 warm-up)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--models", nargs=2, default=["tiny-a", "tiny-b"])
    add_threads_option(parser, "torch threads, both backends")
    parser.add_argument("--repeats", type=int, default=3, help="rollout concurrency repeats")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(
            f"--pairs must be >= 1 (the metered run reuses the last Ray actors), got {args.pairs}"
        )
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    connect(parse_ray_options({}))
    cluster_s = time.perf_counter() - started
    times: dict[str, list[dict[str, Any]]] = {"local": [], "ray": []}
    policies: dict[str, Policy] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for pair in range(args.pairs):
            for backend in ("local", "ray"):
                _shutdown(policies)
                config = make_config(backend, Path(scratch) / f"{backend}-{pair}", args)
                run, policies = timed_run(config)
                times[backend].append(run)
                steps = ", ".join(f"{s['step']:.2f}s" for s in run["steps"])
                print(f"pair {pair} {backend}: start-up {run['startup']:.1f}s, steps {steps}")
        config = make_config("ray", Path(scratch) / "traffic", args)
        traffic = traffic_run(config, policies, args)  # the last run was Ray's
    summary = _report(times, traffic, cluster_s)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
