"""The paper's step at full size on one GPU: SmolLM3-3B and Qwen3-1.7B built from their config
classes with random weights (float32 master weights, bfloat16 autocast, gradient
checkpointing), one `HFPolicy.update` of 8 prompts x 8 responses of 4,096 tokens in
token-budget micro-batches, and the scoring of 16 peer rows of 4,096 tokens; per model and
phase: peak memory beside the memory plan's, tokens/s and MFU.

Needs only torch and transformers (no vLLM, Ray or download); about 8 minutes on one H200.
`--shrink` runs the same path on CPU at a toy size (the smoke test). MFU counts the model
FLOPs a step needs: 6 x linear parameters per token plus causal attention (6 x layers x
q-width x tokens x length), against `--peak-tflops` (H200 dense bfloat16: 989).

    python -m benchmarks.perf.scale_check --out docs/results/scale_check_h200
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from algorithms.training.memory_plan import GIB, Architecture, Workload, plan_policy
from graft_env.policies.options import HFPolicyOptions

MODELS = ("HuggingFaceTB/SmolLM3-3B-Base", "Qwen/Qwen3-1.7B-Base")
SHRUNK = {"HuggingFaceTB/SmolLM3-3B-Base": "smollm3", "Qwen/Qwen3-1.7B-Base": "qwen3"}


def model_flops(arch: Architecture, rows: int, length: int) -> float:
    """Forward + backward FLOPs of `rows` sequences of `length` tokens (no recomputation)."""
    tokens = rows * length
    attention = 6 * arch.num_layers * arch.num_heads * arch.head_dim * tokens * length
    return 6 * arch.linear_params * tokens + attention


def check_model(model: str, args: argparse.Namespace, scratch: Path) -> dict:
    import torch

    import algorithms
    from benchmarks.perf.common import synchronize
    from benchmarks.perf.random_models import (
        grpo_batch,
        paper_config,
        peak_bytes,
        reset_peak,
        shrunk_config,
        write_random_model,
    )
    from graft_env.policies.hf import HFPolicy

    config = shrunk_config(SHRUNK[model]) if args.shrink else paper_config(model)
    arch = Architecture.from_config(config.to_dict())
    options = HFPolicyOptions(
        device=args.device,
        autocast="bfloat16",
        gradient_checkpointing=True,
        max_tokens_per_micro_batch=args.budget,
        logits_chunk_tokens=args.chunk,
        score_batch_size=args.peer_rows,
    )
    started = time.perf_counter()
    directory = write_random_model(scratch / SHRUNK[model], config, seed=0, device=args.device)
    policy = HFPolicy(directory, options=options)
    built = time.perf_counter() - started
    rows = args.prompts * args.n
    batch = grpo_batch(
        arch.vocab_size, args.prompts, args.n, args.prompt_tokens, args.response_tokens, seed=0
    )
    work = Workload(args.prompt_tokens, args.response_tokens, rows)
    plan = plan_policy(arch, options, work)
    loss_fn = algorithms.make("grpo").loss
    report: dict = {"model": model, "parameters": arch.params, "build_s": built}
    policy.update(batch, loss_fn)  # warm-up: AdamW's moments, kernels
    for phase in ("update", "score"):
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
        reset_peak(args.device)
        started = time.perf_counter()
        if phase == "update":
            metrics = policy.update(batch, loss_fn)
            rows_done = rows
        else:
            peers = batch.sequences[: args.peer_rows]
            prompts = [batch.prompts[seq.prompt_index] for seq in peers]
            policy.score_tokens(prompts, [seq.response_token_ids for seq in peers])
            metrics, rows_done = {}, len(peers)
        synchronize(args.device)
        seconds = time.perf_counter() - started
        length = args.prompt_tokens + args.response_tokens
        flops = model_flops(arch, rows_done, length) / (1 if phase == "update" else 3)
        report[phase] = {
            "seconds": seconds,
            "tokens_per_s": rows_done * length / seconds,
            "mfu": flops / seconds / (args.peak_tflops * 1e12),
            "peak_gib": peak_bytes(args.device) / GIB,
            "plan_gib": (plan.persistent_bytes + plan.transient(phase)) / GIB,
            "padding_share": metrics.get("padding_share"),
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shrink", action="store_true", help="toy size on CPU (smoke test)")
    parser.add_argument("--out", type=Path, default=None, help="write results.json here")
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    args = parser.parse_args(argv)
    size = dict(prompts=2, n=2, prompt_tokens=16, response_tokens=32, peer_rows=4, budget=96)
    if not args.shrink:
        size = dict(
            prompts=8, n=8, prompt_tokens=512, response_tokens=4096, peer_rows=16, budget=32768
        )
    vars(args).update(size, chunk=4096 if not args.shrink else 16)
    if args.shrink:
        args.device = "cpu"
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for model in MODELS:
            results.append(check_model(model, args, Path(scratch)))
            _print(results[-1])
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=2))
    return 0


def _print(result: dict) -> None:
    print(f"{result['model']}: {result['parameters'] / 1e9:.2f} B parameters")
    for phase in ("update", "score"):
        r = result[phase]
        print(
            f"  {phase:<7} peak {r['peak_gib']:7.2f} GiB  plan {r['plan_gib']:7.2f} GiB  "
            f"{r['tokens_per_s']:9.0f} tok/s  MFU {r['mfu']:.1%}  {r['seconds']:.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    raise SystemExit(main())
