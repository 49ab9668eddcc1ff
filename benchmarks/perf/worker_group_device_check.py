"""The worker group's rank code on one GPU: FSDP2 at world size 1, the sharded checkpoint and
the update at the paper's token counts, on a Qwen3-1.7B-shaped model with random weights.

What runs is one rank of an agent's worker group (issue 28 item 5): the process group
(nccl on CUDA, gloo on CPU, world size 1), the policy loaded by `load_policy` and sharded
by `fsdp.shard` (`fully_shard` per decoder layer and the root, `MixedPrecisionPolicy` bf16 /
fp32 reduce on CUDA), AdamW over the shards, exactly as `rank.RankWorker.setup` does it
(its Ray-only part, `placement`, is left out: no Ray cluster is needed); then the rank's own
methods: `RankWorker.update` (`sharded_update`: token-budget micro-batches, chunked
log-probs, gradient checkpointing), `score` and `generate` on the gathered model, `save`
and `load` (`sharded_checkpoint`: DCP shards, RNG, HF export). Where `ray` is not
installed (`rank.py` imports it), the same functions are called directly, one call each,
as `RankWorker`'s methods call them; `"driver"` in the results says which ran.

Stages, each with seconds and peak memory (CUDA allocator peak; on CPU the resident
high-water mark) beside the memory plan's prediction for that phase
(`memory_plan.plan_policy`, the sharded terms divided by the world size:
`step_time.gpu_memory.per_gpu_bytes`):

1. `warm_up`: a small update (AdamW's moments exist afterwards, kernels are loaded);
2. `update_peak`: one minibatch of 8 prompts x 8 responses of 4,096 tokens (512-token
   prompts): every micro-batch at the 32,768-token budget, the plan's update peak;
3. `update_paper`: one of the paper's minibatches, 32 prompts x 8 (prompts 80-200 tokens,
   responses of mean ~800, 15 % cut at 4,096: the length mix of `step_time.workload.LengthMix`),
   with `padding_share`; x 4 minibatches it is the step's update, printed beside
   `step_time.phases.update_s` for one GPU;
4. `score`: 16 peer rows of 4,096 tokens scored (re-tokenised text) on the gathered model;
5. `generate`: 8 prompts x 2 samples of up to 32 tokens on the gathered model;
6. `checkpoint`: `save`, a further update (weights and moments move) and draws from the CPU
   (and on CUDA the CUDA) generator, `load`; every model and optimizer tensor and the CPU
   RNG state must equal what was saved (bitwise).

`--smoke` runs the same stages on CPU with gloo at a toy size (Qwen3 layer structure,
hidden 64, 2 layers, a 2,048-token vocabulary, responses of <= 24 tokens); that is what
tests/benchmarks/test_worker_group_device_check.py runs. **The GPU path has not run**: no
GPU was lent to the session that wrote this. Expected on one H200 (from the step estimate's
measured 122 TFLOP/s, not measured here): about 4 minutes, mostly the two paper-sized updates
(~45-50 s each) and the ~27 GB checkpoint written and read. Needs torch, transformers and the
project's pure-Python dependencies; no vLLM, no Ray (with Ray installed the rank's own
`RankWorker` methods run; without it `DirectRank`), no download. The policy options are the
Qwen3 agent's of configs/paper_smollm3_qwen3.yaml (`options_for`: only the device, the
micro-batch budget, the logits chunk, transformers sampling and local files are set here).

Results go to `--out`: results.json and summary.txt, written before every stage (the stage
about to run is marked `running_since_s`) and after it, so a run killed mid-stage keeps what
ran. The time budget: a stage is skipped, with every stage after it (listed as skipped, exit
status 1), when the seconds spent so far plus its expected seconds (`expected_seconds`, in
results.json under settings.expected_s: a 20 s floor per stage, 3 x the step estimate's
update for the two updates, file bytes at an assumed 0.5 GB/s disk and the checkpoint's host
snapshots at 2 GB/s; for Qwen3-1.7B: build 34, setup 34, updates 164 and 149, checkpoint
147 s) pass `--time-budget-s` (420 s). What that bounds, honestly: the check cannot stop a
stage that has started, so the run ends by 420 s after its stages' clock starts only if each
stage stays within its expected seconds; a stage that runs longer overshoots by its excess,
and the process start (imports, CUDA init) comes on top. The device's 600 s per-call limit
leaves 180 s for both; past it the run is killed and the files show the stage it was in.
A checkpoint that does not come back bitwise (or draws that did not move the RNG) is an
error (exit status 1). On CUDA the CUDA generator is compared too and reported apart:
`sharded_checkpoint` saves the CPU generator only, so summary.txt states as a FINDING that
load does not restore it (expected; not checked on a GPU).

    python -m benchmarks.perf.worker_group_device_check --out docs/results/worker_group_h200
    python -m benchmarks.perf.worker_group_device_check --smoke --out /tmp/wg-smoke

This module is the command line and the stages' order; the rank's code is in
`worker_group_rank`, the sizes, options, batches and predictions in `worker_group_sizes`, the
stage runner and the two files in `worker_group_stages`.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from algorithms.training.memory_plan import Architecture, Workload
from benchmarks.perf.worker_group_rank import (
    DirectRank,
    checkpoint_round,
    differences,
    make_rank,
    set_up,
)
from benchmarks.perf.worker_group_sizes import (
    FULL,
    MODEL,
    PAPER_CONFIG,
    SMOKE,
    Size,
    exact_batch,
    expected_seconds,
    mix_batch,
    options_for,
    plan_for,
    update_estimate_s,
)
from benchmarks.perf.worker_group_stages import Stages, summary_lines
from graft_env.types import TrainBatch

__all__ = [
    "PAPER_CONFIG",
    "SMOKE",
    "DirectRank",
    "Stages",
    "check",
    "differences",
    "main",
    "options_for",
]
"""The entry point and what tests/benchmarks/test_worker_group_device_check.py reaches here."""


def check(args: argparse.Namespace) -> dict:
    import torch
    import transformers

    from benchmarks.perf.random_models import (
        TOY_QWEN3,
        config_of,
        paper_config,
        write_random_model,
    )

    size = SMOKE if args.smoke else FULL
    config = config_of("Qwen3Config", TOY_QWEN3) if args.smoke else paper_config(MODEL)
    arch = Architecture.from_config(config.to_dict())
    options = options_for(size, args.device)
    rank, driver = make_rank(args.threads, args.direct)
    results: dict = {
        "environment": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        },
        "settings": {
            "model": MODEL if not args.smoke else "qwen3 (smoke size)",
            "parameters": arch.params,
            "options": options,
            "size": asdict(size),
            "driver": driver,
        },
        "stages": {},
    }
    results["settings"]["expected_s"] = expected = expected_seconds(arch, options, size)
    stages = Stages(args, results, expected)
    scratch = Path(tempfile.mkdtemp(prefix="wg-device-check-", dir=args.scratch))
    try:
        run_stages(stages, rank, arch, config, options, size, scratch, write_random_model)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        shutil.rmtree(scratch, ignore_errors=True)
    results["total_s"] = sum(s.get("seconds", 0.0) for s in results["stages"].values())
    stages.write()
    return results


def run_stages(stages, rank, arch, config, options, size: Size, scratch: Path, write) -> None:
    from graft_env.policies import SamplingParams

    args, vocab, n = stages.args, arch.vocab_size, size.n
    directory = scratch / "model"
    stages.run(
        "build",
        lambda: {"path": str(write(directory, config, seed=0, device=args.device))},
    )
    setup = stages.run("setup", lambda: set_up(rank, directory, options))
    if "seconds" not in setup:
        return
    policy = rank.policy

    def update(batch: TrainBatch) -> Callable[[], dict]:
        def go() -> dict:
            metrics = rank.update(batch)
            return {
                "rows": len(batch.sequences),
                "response_tokens": int(metrics["tokens"]),
                "padding_share": metrics.get("padding_share"),
                "loss": metrics["loss"],
                "grad_norm": metrics.get("grad_norm"),
            }

        return go

    warm = exact_batch(vocab, 1, size.warm_rows, 8, size.warm_tokens, seed=1)
    stages.run("warm_up", update(warm))

    peak = exact_batch(
        vocab, size.peak_prompts, n, size.peak_prompt_tokens, size.peak_response_tokens, seed=2
    )
    peak_work = Workload(size.peak_prompt_tokens, size.peak_response_tokens, len(peak.sequences))
    record = stages.run("update_peak", update(peak), plan_for(arch, options, peak_work)["update"])
    _rate(record, peak)

    paper = mix_batch(vocab, size.paper_prompts, n, size.mix, seed=3)
    longest_prompt = max(len(text.split()) for text in paper.prompts)
    paper_work = Workload(longest_prompt, size.mix.cap, len(paper.sequences))
    record = stages.run(
        "update_paper", update(paper), plan_for(arch, options, paper_work)["update"]
    )
    _rate(record, paper)
    if "seconds" in record:
        _beside_estimate(record, arch, options, size)

    peers = peak.sequences[: size.peer_rows]
    texts = [" ".join(f"t{i}" for i in seq.response_token_ids) for seq in peers]
    prompts = [peak.prompts[seq.prompt_index] for seq in peers]
    score_work = Workload(size.peak_prompt_tokens, size.peak_response_tokens, len(peers))

    def score() -> dict:
        scored = rank.score(prompts, texts, ["length"] * len(texts))
        lengths = [len(item.token_ids) for item in scored]
        finite = all(np.isfinite(item.logprobs).all() for item in scored)
        return {"rows": len(scored), "tokens": sum(lengths), "finite": bool(finite)}

    stages.run("score", score, plan_for(arch, options, score_work)["score"])

    def generate() -> dict:
        sampling = SamplingParams(max_new_tokens=size.generate_tokens, seed=0)
        blocks = [(list(peak.prompts[: size.generate_prompts]), 0)]
        groups = rank.generate(blocks, 2, sampling)[0]
        tokens = sum(len(g.token_ids) for group in groups for g in group)
        return {"sequences": sum(map(len, groups)), "tokens": tokens}

    gen_work = Workload(size.peak_prompt_tokens, size.generate_tokens, 1)
    stages.run("generate", generate, plan_for(arch, options, gen_work)["generate"])
    saved = stages.run(
        "checkpoint", lambda: checkpoint_round(rank, policy, warm, scratch / "checkpoint")
    )
    if saved.get("equal_after_load") is False or saved.get("rng_moved_before_load") is False:
        stages.results.setdefault("errors", []).append(
            "checkpoint: not bitwise equal after load, or the draws did not move the RNG"
        )


def _rate(record: dict, batch: TrainBatch) -> None:
    if "seconds" in record:
        tokens = sum(len(s.response_token_ids) for s in batch.sequences)
        record["response_tokens_per_s"] = tokens / record["seconds"]


def _beside_estimate(record: dict, arch: Architecture, options: dict, size: Size) -> None:
    """The step estimate's update of one minibatch on one GPU (A3), beside the measured one."""
    estimate = update_estimate_s(arch, options, size, peak=False)
    record["estimate_s"] = estimate
    record["estimate_over_measured"] = estimate / record["seconds"]


def main(argv: list[str] | None = None) -> int:
    from benchmarks.perf.common import add_threads_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="toy size on CPU with gloo")
    parser.add_argument("--direct", action="store_true", help="without RankWorker (no Ray)")
    parser.add_argument("--out", type=Path, default=None, help="results.json, summary.txt")
    parser.add_argument("--scratch", type=Path, default=None, help="model and checkpoint dir")
    parser.add_argument(
        "--time-budget-s",
        type=float,
        default=420.0,
        help="skip a stage whose expected seconds would end past this many seconds (default "
        "420; see the module docstring for the bound)",
    )
    add_threads_option(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.device = "cpu"
    import torch

    torch.set_num_threads(args.threads)
    results = check(args)
    lines = summary_lines(results)
    print("\n".join(lines))
    if args.out is not None:
        (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
    return 1 if results.get("errors") or results.get("skipped") else 0


if __name__ == "__main__":
    raise SystemExit(main())
