"""Peak memory of one update micro-batch and one scoring forward, full logits vs chunked.

A Qwen3 built from `transformers.Qwen3Config` with its real 151,936-token vocabulary and a
shrunk body (hidden 64, 2 layers; no download), so the logits are nearly all the memory a
forward takes. For each response length R: the update's forward + backward of one
micro-batch (`forward.response_logprobs` with grad, then backward of its summed
log-probs) and a no-grad scoring forward, each in a fresh process, with
`logits_chunk_tokens` huge (the old one-pass path: logits of every position) against
`--chunk`. Reported: the peak resident memory above the process's resident memory after
the model is built (ru_maxrss, so one process per measurement).

    python -m benchmarks.perf.logits_memory [--sizes 512 1024 2048] [--rows 1] [--chunk 256]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

ONE_PASS = 10**9  # a chunk larger than any forward: the old full-logits path
TOY_QWEN3 = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    tie_word_embeddings=True,
)
"""A toy-width Qwen3 body (q/k norms, GQA, tied head); the vocabulary is `--vocab`'s."""


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def measure(part: str, response_len: int, rows: int, chunk: int, vocab: int) -> float:
    """MiB of peak resident memory above the built model's, for one forward of `part`."""
    import torch
    import transformers

    from graft_env.policies.forward import response_logprobs

    torch.set_num_threads(1)
    torch.manual_seed(0)
    fields = {**TOY_QWEN3, "vocab_size": vocab, "max_position_embeddings": response_len + 128}
    config = transformers.Qwen3Config(**fields)
    model = transformers.Qwen3ForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, vocab, (100,), generator=generator).tolist()] * rows
    responses = [
        torch.randint(1, vocab, (response_len,), generator=generator).tolist() for _ in prompts
    ]
    baseline = _resident_bytes()
    with torch.set_grad_enabled(part == "update"):
        result = response_logprobs(
            model,
            prompts,
            responses,
            pad_id=0,
            temperature=1.0,
            with_entropy=True,
            share_prompts=True,
            logits_chunk_tokens=chunk,
        )
        if part == "update":
            result.logprobs.sum().backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return (peak - baseline) / 2**20


def _in_child(part: str, response_len: int, rows: int, chunk: int, vocab: int) -> float:
    command = [sys.executable, "-m", "benchmarks.perf.logits_memory", "--child"]
    command += [json.dumps([part, response_len, rows, chunk, vocab])]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return float(output.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--rows", type=int, default=1, help="rows per forward")
    parser.add_argument("--chunk", type=int, default=256, help="logits_chunk_tokens after")
    parser.add_argument("--vocab", type=int, default=151936, help="Qwen3's real vocabulary")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(measure(*json.loads(args.child)))
        return []
    rows = []
    print(f"{'R':>6} {'part':>8} {'one pass MiB':>13} {'chunked MiB':>12} {'ratio':>6}")
    for response_len in args.sizes:
        for part in ("update", "scoring"):
            sizes = (response_len, args.rows, args.vocab)
            before = _in_child(part, sizes[0], sizes[1], ONE_PASS, sizes[2])
            after = _in_child(part, sizes[0], sizes[1], args.chunk, sizes[2])
            row = {"R": response_len, "part": part, "one_pass_mib": before, "chunked_mib": after}
            rows.append(row)
            ratio = after / before if before > 0 else float("nan")
            print(f"{response_len:>6} {part:>8} {before:>13.0f} {after:>12.0f} {ratio:>6.2f}")
    return rows


if __name__ == "__main__":
    main()
