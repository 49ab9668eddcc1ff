"""Generation tokens/s of the vLLM rollout backend against the transformers one.

One `VLLMPolicy` per model holds both: its `generate` samples through the vLLM
engine, and `HFPolicy.generate` on the same object samples through transformers,
plain and with the `packed_decode` option (oneDNN on prepacked weights), with the
same weights, prompts, n and token budget. Each is timed `--repeats`
times, interleaved, and the best run counts, since the 2 shared cores make single
runs noisy; only the ratio of the two, measured side by side, means anything.
The vLLM worker binds one core; `--threads` (default 1) sets transformers' torch
threads so both sample on one core. Needs vLLM (see `.ci/vllm`); run it as

    python -m benchmarks.perf.vllm_throughput [--models tiny-a smollm2-135m]
        [--prompts 16 --n 4 --max-new-tokens 64 --repeats 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.perf.common import PROBLEMS, add_threads_option, lever
from graft_env.policies import HFPolicy, SamplingParams, load_policy


def _rate(run: Callable[[], int]) -> tuple[float, int]:
    """(tokens/s, tokens) of one call of `run`, which returns the tokens it generated."""
    started = time.perf_counter()
    tokens = run()
    return tokens / (time.perf_counter() - started), tokens


def measure(model: str, prompts: int, n: int, max_new: int, repeats: int) -> dict:
    policy = load_policy(model, rollout_backend="vllm", generation_batch_size=prompts * n)
    try:
        texts = [policy.format_prompt(p) for p in PROBLEMS[:prompts]]
        sampling = SamplingParams(max_new_tokens=max_new, seed=0)

        def tokens(groups) -> int:
            return sum(len(g.token_ids) for group in groups for g in group)

        def transformers(name: str) -> int:  # name: a decoding lever (common.LEVERS)
            with lever(policy, name):
                return tokens(HFPolicy.generate(policy, texts, n, sampling))

        backends = {
            "vllm": lambda: tokens(policy.generate(texts, n, sampling)),
            "transformers": lambda: transformers("plain"),
            "transformers_packed": lambda: transformers("packed"),
        }
        for run in backends.values():  # warm-up: first calls allocate caches and kernels
            run()
        rates = {name: (0.0, 0) for name in backends}
        for _ in range(repeats):  # interleave so load spikes hit both alike
            for name, run in backends.items():
                rates[name] = max(rates[name], _rate(run))
    finally:
        policy.close()
    return {
        "model": model,
        "sequences": prompts * n,
        "vllm_tokens_per_s": rates["vllm"][0],
        "transformers_tokens_per_s": rates["transformers"][0],
        "packed_tokens_per_s": rates["transformers_packed"][0],
        "tokens": {name: rate[1] for name, rate in rates.items()},
        "transformers_over_vllm": rates["transformers"][0] / rates["vllm"][0],
        "packed_over_vllm": rates["transformers_packed"][0] / rates["vllm"][0],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny-a"])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    add_threads_option(parser, "torch threads (transformers)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = [
        measure(model, args.prompts, args.n, args.max_new_tokens, args.repeats)
        for model in args.models
    ]
    header = f"{'model':<16}{'seqs':>6}{'vLLM':>8}{'HF':>8}{'HF packed':>11}"
    print(f"{header}{'HF / vLLM':>11}{'packed / vLLM':>15}   (tokens/s)")
    for row in results:
        print(
            f"{row['model']:<16}{row['sequences']:>6}{row['vllm_tokens_per_s']:>8.0f}"
            f"{row['transformers_tokens_per_s']:>8.0f}{row['packed_tokens_per_s']:>11.0f}"
            f"{row['transformers_over_vllm']:>11.2f}{row['packed_over_vllm']:>15.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":  # vLLM starts its engine processes with spawn
    main()
