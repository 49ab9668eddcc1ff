"""The memory plan against measured peaks on CPU: `HFPolicy.update` and `score_tokens` on the
paper's architectures (SmolLM3, Qwen3, Llama-3.2: real vocabularies and layer layouts, shrunk
width and depth, random weights), each case in a fresh process.

What is measured: the process's peak resident memory (Linux VmHWM, reset through
/proc/self/clear_refs just before the measured call), less its resident memory before the
policy was built. torch's CPU allocator keeps no statistics (`torch.cuda.max_memory_allocated`
has no CPU counterpart) and tracemalloc sees only Python's own allocations, not tensor
storage; resident memory does see every tensor once it is written. Each case runs in its own
process with glibc's mmap threshold fixed at 64 KiB (MALLOC_MMAP_THRESHOLD_), so every tensor
above that is mapped on allocation and returned on free, and a case's peak does not include
what an earlier case left in the heap. The measured call runs after a warm-up update, so
AdamW's moments exist, as in every step after the first.

    python -m benchmarks.perf.memory_plan_check            # the table; exit 1 past --tolerance
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from algorithms.training.memory_plan import GIB, Architecture, Workload, plan_policy
from graft_env.policies.options import HFPolicyOptions


@dataclass(frozen=True)
class Case:
    architecture: str
    phase: str  # "update" or "score"
    response_tokens: int
    rows: int = 2
    prompt_tokens: int = 64
    gradient_checkpointing: bool = True

    def options(self) -> HFPolicyOptions:
        return HFPolicyOptions(
            autocast="bfloat16",
            gradient_checkpointing=self.gradient_checkpointing,
            micro_batch_size=1,
            score_batch_size=1,
        )


def default_cases(responses: list[int]) -> list[Case]:
    cases = [
        Case(arch, phase, length)
        for arch in ("smollm3", "qwen3", "llama3.2")
        for phase in ("update", "score")
        for length in responses
    ]
    return [*cases, Case("qwen3", "update", max(responses), gradient_checkpointing=False)]


def measure(case: Case, scratch: Path) -> dict[str, float]:
    """In this process: build the case's model, warm up, then the peak of its phase (bytes)."""
    import torch

    import algorithms
    from benchmarks.perf.random_models import (
        grpo_batch,
        peak_bytes,
        reset_peak,
        resident_bytes,
        shrunk_config,
        write_random_model,
    )
    from graft_env.policies.hf import HFPolicy

    torch.set_num_threads(1)
    config = shrunk_config(case.architecture)
    directory = write_random_model(scratch / case.architecture, config, seed=0)
    batch = grpo_batch(
        config.vocab_size, 1, case.rows, case.prompt_tokens, case.response_tokens, seed=0
    )
    loss_fn = algorithms.make("grpo").loss
    before = resident_bytes()
    policy = HFPolicy(directory, options=case.options())
    policy.update(batch, loss_fn)  # AdamW's moments now exist
    rest = resident_bytes()
    reset_peak("cpu")
    if case.phase == "update":
        policy.update(batch, loss_fn)
    else:
        responses = [seq.response_token_ids for seq in batch.sequences]
        policy.score_tokens([batch.prompts[0]] * len(responses), responses)
    peak = peak_bytes("cpu")
    return {"total": peak - before, "transient": peak - rest, "at_rest": rest - before}


def planned(case: Case) -> dict[str, float]:
    from benchmarks.perf.random_models import shrunk_config

    arch = Architecture.from_config(shrunk_config(case.architecture).to_dict())
    work = Workload(case.prompt_tokens, case.response_tokens, case.rows)
    plan = plan_policy(arch, case.options(), work)
    transient = plan.transient(case.phase, cuda=False)  # measured on a CPU
    return {"total": plan.persistent_bytes + transient, "transient": transient}


def measure_in_subprocess(case: Case) -> dict[str, float]:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "benchmarks.perf.memory_plan_check", "--case"]
    result = subprocess.run(
        [*command, json.dumps(asdict(case))], env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(f"case {case} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def report(cases: list[Case], tolerance: float) -> list[dict]:
    print(
        f"{'architecture':<10}{'phase':<8}{'R':>6}{'ckpt':>6}"
        f"{'measured GiB':>14}{'plan GiB':>10}{'plan/meas':>10}"
        f"{'transient':>11}{'plan':>8}{'ratio':>7}"
    )
    rows = []
    for case in cases:
        got, plan = measure_in_subprocess(case), planned(case)
        ratio = plan["total"] / got["total"]
        ratio_transient = plan["transient"] / got["transient"]
        print(
            f"{case.architecture:<10}{case.phase:<8}{case.response_tokens:>6}"
            f"{'on' if case.gradient_checkpointing else 'off':>6}"
            f"{got['total'] / GIB:>14.3f}{plan['total'] / GIB:>10.3f}{ratio:>10.2f}"
            f"{got['transient'] / GIB:>11.3f}{plan['transient'] / GIB:>8.3f}"
            f"{ratio_transient:>7.2f}",
            flush=True,
        )
        rows.append({**asdict(case), "measured": got, "plan": plan, "ratio": ratio})
    worst = max(abs(row["ratio"] - 1) for row in rows)
    print(f"worst |plan / measured - 1| of the peaks: {worst:.2f} (tolerance {tolerance:.2f})")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--architectures", nargs="+", default=None)
    parser.add_argument("--tolerance", type=float, default=0.2)
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args(argv)
    if args.case is not None:
        with tempfile.TemporaryDirectory() as scratch:
            print(json.dumps(measure(Case(**json.loads(args.case)), Path(scratch))))
        return 0
    cases = default_cases(args.responses)
    if args.architectures:
        cases = [case for case in cases if case.architecture in args.architectures]
    rows = report(cases, args.tolerance)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return int(max(abs(row["ratio"] - 1) for row in rows) > args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
