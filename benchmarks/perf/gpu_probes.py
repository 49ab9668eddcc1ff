"""One-GPU probes of what the worker-group path assumes and CPU runs cannot show (issue 37
item 7), torch + transformers only (the machine they are for has no vLLM and no Ray).

Each probe runs in a fresh process (`--child`), so its allocator starts empty and its CUDA
context is its own, under its own time budget: past it the probe's process group is
killed and recorded as such; a probe whose budget would end past `--time-budget-s` (480 s,
8 minutes) is skipped. The probes and their budgets (`PROBES`):

- `a_ipc_share` (45 s): two processes share a staging buffer over CUDA IPC, with expandable
  segments off and on (`gpu_probe_ipc.share_buffer`): bytes equal on the consumer side, its
  write seen by the producer, or the error (pidfd_getfd refused in a container);
- `b_ack_race` (45 s): the bucketed sync's acknowledgement race, acknowledge-before-
  synchronize against synchronize-then-acknowledge, wrong bytes per bucket
  (`gpu_probe_ipc.ack_race`);
- `c_memory` (75 s): allocated / reserved / peak around one update of a Qwen3-1.7B shape
  (random init) and what `empty_cache` returns (`gpu_probe_compute.memory_around_update`);
  and attention's [L, L] tensors on a tiny Qwen3 against the plan's attention terms, which
  CUDA's SDPA kernels may hold otherwise than the CPU's, at L and N multiples of 8 and not
  (where the memory-efficient kernel makes its alignment copy), `attention_memory.compare`,
  whose error is reported beside the update's figures;
- `d_sampling` (40 s): one decode step's draw at 256 rows x 151,936 (Qwen3's vocabulary),
  per-request generators against one batched draw (`gpu_probe_compute.sampling_draws`);
- `e_rank_rate` (240 s): a worker-group rank's update of one paper minibatch and scoring of
  16 peer rows at 4,608 tokens, Qwen3-1.7B shape and vocabulary: tokens/s, executed TFLOP/s
  beside the step estimate's measured rate, MFU (`gpu_probe_compute.rank_rate`).

`--smoke` runs on CPU at toy sizes what CPU can run: (a) through CPU shared memory (the
consumer logic; no CUDA IPC) with the expandable case "skipped: no CUDA", (b) as a
deterministic thread model of the protocol, (d) and (e) tiny; (c) is "skipped: no CUDA".
That is what tests/benchmarks/test_gpu_probes.py runs.

Results go to `--out`: results.json (written after every probe, so a killed run keeps what
ran) and summary.txt. **Not yet run on a GPU**; when it is, its output belongs under
docs/results/gpu_probes/:

    python -m benchmarks.perf.gpu_probes --out docs/results/gpu_probes
    python -m benchmarks.perf.gpu_probes --smoke --out /tmp/gpu-probes-smoke
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.perf.common import REPO

PROBES = {
    "a_ipc_share": 45.0,
    "b_ack_race": 45.0,
    "c_memory": 75.0,
    "d_sampling": 40.0,
    "e_rank_rate": 240.0,
}
"""Each probe's time budget in seconds (its process included)."""
CUDA_ONLY = {"c_memory"}
NO_CUDA = "skipped: no CUDA"


def run_probe(name: str, device: str, smoke: bool, budget_s: float) -> dict:
    """The probe `name`'s results (in this process: the `--child` side)."""
    from benchmarks.perf import gpu_probe_compute as compute
    from benchmarks.perf import gpu_probe_ipc as ipc

    cuda = device.startswith("cuda")
    if name == "a_ipc_share":
        mib = 256 if cuda else 1
        cases = {"expandable_off": False if cuda else None, "expandable_on": True}
        return {
            case: ipc.share_buffer(device, mib, setting, budget_s / 3)
            if cuda or setting is None
            else NO_CUDA
            for case, setting in cases.items()
        }
    if name == "b_ack_race":
        mib = 64.0 if cuda else 1 / 16
        return ipc.ack_race(device, 8 if cuda else 4, mib, spin_ms=5.0, budget_s=budget_s * 0.8)
    if name == "c_memory":
        return memory_probe(device)
    if name == "d_sampling":
        rows, vocab = (256, 151936) if cuda else (8, 1000)
        return compute.sampling_draws(device, rows, vocab, 200 if cuda else 5, budget_s / 2)
    if name == "e_rank_rate":
        from algorithms.training.step_time.anchors import GPUS

        peak = GPUS["h200"].bf16_tflops * 1e12 if cuda else None
        return compute.rank_rate(device, smoke, peak)
    raise ValueError(f"unknown probe {name!r}; probes: {sorted(PROBES)}")


def memory_probe(device: str) -> dict:
    """(c): the allocator around one update, and `attention_memory.compare`, whose error is
    recorded under "attention" so that the update's figures still report."""
    from benchmarks.perf import gpu_probe_compute as compute
    from benchmarks.perf.attention_memory import compare
    from benchmarks.perf.random_models import paper_config
    from benchmarks.perf.worker_group_sizes import MODEL

    update = compute.memory_around_update(paper_config(MODEL), 4, 4096, 4096)
    try:
        attention: list | dict = compare(device)
    except Exception as err:  # recorded beside the update's figures
        attention = {"error": f"{type(err).__name__}: {err}"}
    return {**update, "attention": attention}


def _child(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    try:
        record = run_probe(args.child, args.device, args.smoke, PROBES[args.child])
    except Exception as err:  # written for the parent, which reports it
        record = {"error": f"{type(err).__name__}: {err}"}
    args.child_out.write_text(json.dumps(record, indent=2))
    return 0


def _spawn(name: str, args: argparse.Namespace, scratch: Path) -> dict:
    """Run probe `name` in a fresh process group under its budget; kill the group past it."""
    out = scratch / f"{name}.json"
    command = [sys.executable, "-m", "benchmarks.perf.gpu_probes", "--child", name]
    command += ["--device", args.device, "--threads", str(args.threads), "--child-out", str(out)]
    command += ["--smoke"] if args.smoke else []
    budget = PROBES[name]
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, start_new_session=True)
    try:
        process.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return {"status": f"killed at its {budget:.0f} s budget", "seconds": budget}
    seconds = time.perf_counter() - started
    if not out.is_file():
        return {"status": f"error: exit status {process.returncode}, no result", "seconds": seconds}
    record = json.loads(out.read_text())
    status = f"error: {record['error']}" if "error" in record else "ok"
    return {"status": status, "seconds": seconds, **record}


def probe_all(args: argparse.Namespace) -> dict:
    """Every probe in order under the budgets; results.json written after each."""
    import torch
    import transformers

    cuda = args.device.startswith("cuda")
    results: dict[str, Any] = {
        "environment": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "device": torch.cuda.get_device_name(0) if cuda else "cpu",
            "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        },
        "settings": {
            "smoke": args.smoke,
            "budgets_s": PROBES,
            "total_budget_s": args.time_budget_s,
        },
        "probes": {},
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-probes-") as scratch:
        for name, budget in PROBES.items():
            elapsed = time.perf_counter() - started
            if not cuda and name in CUDA_ONLY:
                record: dict = {"status": NO_CUDA}
            elif elapsed + budget > args.time_budget_s:
                record = {"status": f"skipped: {elapsed:.0f} s + {budget:.0f} s > budget"}
            else:
                print(f"[{name}] budget {budget:.0f} s", flush=True)
                record = _spawn(name, args, Path(scratch))
            results["probes"][name] = {"budget_s": budget, **record}
            _write(args.out, results)
    results["total_s"] = time.perf_counter() - started
    _write(args.out, results)
    return results


def _write(out: Path | None, results: dict) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results, indent=2))
        (out / "summary.txt").write_text("\n".join(summary_lines(results)) + "\n")


def _headline(name: str, r: dict) -> str:
    """The one figure each probe is for."""
    if name == "a_ipc_share":
        return "; ".join(
            f"{case}: {v}"
            if isinstance(v, str)
            else f"{case}: {v.get('error') or 'bytes equal ' + str(v.get('bytes_equal'))}, "
            f"write-back seen {v.get('write_back_seen')}"
            for case, v in r.items()
            if case.startswith("expandable")
        )
    if name == "b_ack_race":
        return "; ".join(
            f"{p}: {r[p].get('error') or str(r[p].get('corrupted_buckets')) + ' corrupted'}"
            f" of {r['buckets']} buckets"
            for p in ("ack_before_sync", "sync_then_ack")
        )
    if name == "c_memory":
        held, returned = (
            r["reserved_not_allocated_after_update_gib"],
            r["returned_by_empty_cache_gib"],
        )
        return (
            f"reserved, not allocated after the update {held:.2f} GiB; "
            f"empty_cache returned {returned:.2f} GiB; {_attention_headline(r['attention'])}"
        )
    if name == "d_sampling":
        return (
            f"{r['rows']} x {r['vocab']}: per-request {r['per_request_s'] * 1e3:.2f} ms, "
            f"batched {r['batched_s'] * 1e3:.2f} ms ({r['per_request_over_batched']:.1f}x)"
        )
    update, score = r["update"], r["score"]
    mfu = "" if update["mfu"] is None else f", MFU {update['mfu']:.1%}"
    return (
        f"update {update['tokens_per_s']:.0f} tok/s, {update['executed_tflop_per_s']:.1f} "
        f"TFLOP/s executed (estimate {r['estimate_tflop_per_s']:.0f}){mfu}, "
        f"{update['seconds']:.1f} s vs estimate {update['estimate_s']:.1f} s; "
        f"score {score['tokens_per_s']:.0f} tok/s"
    )


def _attention_headline(attention: list | dict) -> str:
    """Plan / measured over `attention_memory.compare`'s cases, L (and N) a multiple of 8 and
    not (where CUDA's alignment copy is made), or its error."""
    if isinstance(attention, dict):
        return f"attention: {attention['error']}"
    ranges = []
    for aligned in (True, False):
        ratios = [
            c["planned"]["peak"] / max(c["peak"], 1) for c in attention if c["aligned"] is aligned
        ]
        ranges.append(f"{min(ratios):.2f}-{max(ratios):.2f}")
    return f"attention plan / measured {ranges[0]} (L, N not multiples of 8: {ranges[1]})"


def summary_lines(results: dict) -> list[str]:
    env = results["environment"]
    lines = [f"{env['device']}, torch {env['torch']}, transformers {env['transformers']}"]
    for name, r in results["probes"].items():
        head = f"{name:<12} {r.get('seconds', 0.0):6.1f} s of {r['budget_s']:.0f}  {r['status']}"
        lines.append(head + (f"  {_headline(name, r)}" if r["status"] == "ok" else ""))
    if "total_s" in results:
        lines.append(
            f"total {results['total_s']:.1f} s of {results['settings']['total_budget_s']:.0f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    from benchmarks.perf.common import add_threads_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="CPU, toy sizes")
    parser.add_argument("--out", type=Path, default=None, help="results.json, summary.txt")
    parser.add_argument("--time-budget-s", type=float, default=480.0)
    parser.add_argument("--child", choices=sorted(PROBES), help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    add_threads_option(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.device = "cpu"
    if args.child:
        return _child(args)
    results = probe_all(args)
    print("\n".join(summary_lines(results)))
    failed = [
        n for n, r in results["probes"].items() if not r["status"].startswith(("ok", NO_CUDA))
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
