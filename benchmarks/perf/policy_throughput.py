"""Overhead of the Policy layer over bare transformers calls on the same inputs.

Generation: `HFPolicy.generate` (own KV-cache loop that records log-probs) against
`model.generate(do_sample=True)`. Training: `HFPolicy.update` with the GRPO loss
against a bare step (forward, log-softmax, gather, a token-mean surrogate,
backward, clip, AdamW) on the same padded tensors. Reported as tokens/s and the
ratio bare / policy (target: overhead <= 10 %). Each measurement is the best of
`--repeats` interleaved runs, because the 2 shared cores make single runs noisy.
On CUDA every timing waits for the device (`torch.cuda.synchronize`) before the clock.

`--levers` also measures decoding levers (issue 15, item 3) on `HFPolicy.generate`, each
alternated round by round with the plain policy: its tokens/s, the per-round ratio plain /
lever (median and range), in how many rows it samples the same tokens, and by how much
the recorded log-probs move on the tokens both runs share. `packed`: the `packed_decode`
option (every `nn.Linear` on oneDNN with weights prepacked once per weight version,
`policies.packed`); `bf16`:
bfloat16 autocast (the `autocast` option); `inference_mode`: `torch.inference_mode`
instead of `no_grad`.

    python -m benchmarks.perf.policy_throughput [--model DIR] [--prompts 16 --n 4]
        [--device cuda --dtype bfloat16 | --autocast bfloat16]
        [--levers packed,bf16,inference_mode --top-p 0.95 --rounds 7]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import algorithms
from benchmarks.perf.common import (
    LEVERS,
    PROBLEMS,
    add_threads_option,
    grpo_batch,
    lever,
    synchronize,
)
from graft_env.policies import Generation, HFPolicy, HFPolicyOptions, SamplingParams
from graft_env.policies.forward import pack_prompt_response, position_ids_from_mask
from graft_env.policies.loading import DTYPES
from graft_env.policies.tiny.models import TinyShape, build_model
from graft_env.policies.tiny.tokenizer import PLAIN_STYLE, train_tokenizer
from graft_env.types import TrainBatch

SMOLLM2_SHAPE = {  # HuggingFaceTB/SmolLM2-135M's config.json
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "max_position_embeddings": 8192,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
}


def _random_model(directory: Path, shape: str = "tiny") -> Path:
    """A random-init model with the tiny tokenizer: EOS is rare, so lengths are equal.

    "tiny": the default-shape tiny GPT-2; "smollm2": a Llama of SmolLM2-135M's shape
    (576 wide, 30 layers, 9 heads / 3 KV heads, vocabulary 49,152), for its throughput.
    """
    corpus = [f"{p} The answer is \\boxed{{{i}}}." for i, p in enumerate(PROBLEMS * 20)]
    tokenizer = train_tokenizer(corpus, PLAIN_STYLE)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    if shape == "tiny":
        model = build_model("gpt2", len(tokenizer), eos, pad, TinyShape(), seed=0)
    else:
        config = LlamaConfig(**SMOLLM2_SHAPE, bos_token_id=eos, eos_token_id=eos, pad_token_id=pad)
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _timed(run: Callable[[], int], device: str | torch.device = "cpu") -> tuple[float, int]:
    """(seconds, tokens processed) of one call."""
    synchronize(device)
    started = time.perf_counter()
    tokens = run()
    synchronize(device)
    return time.perf_counter() - started, tokens


def _bare_generate(policy: HFPolicy, prompts: list[str], n: int, max_new: int) -> int:
    rows = [policy.encode_prompt(p) for p in prompts for _ in range(n)]
    ids, mask, _, _ = pack_prompt_response(rows, [[] for _ in rows], policy.pad_id, policy.device)
    output = policy.model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=max_new,
        pad_token_id=policy.pad_id,
        eos_token_id=policy.eos_id,
    )
    new = output[:, ids.shape[1] :]
    return int((new != policy.pad_id).sum())


def _train_batch(policy: HFPolicy, prompts: list[str], n: int, max_new: int) -> TrainBatch:
    groups = policy.generate(prompts, n, SamplingParams(max_new_tokens=max_new, seed=1))
    return grpo_batch(policy.name, prompts, groups)


def _bare_train_step(policy: HFPolicy, batch: TrainBatch, optimizer: torch.optim.Optimizer) -> int:
    prompts = [policy.encode_prompt(batch.prompts[s.prompt_index]) for s in batch.sequences]
    responses = [s.response_token_ids for s in batch.sequences]
    ids, mask, targets, target_mask = pack_prompt_response(
        prompts, responses, policy.pad_id, policy.device
    )
    logits = (
        policy.model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask))
        .logits[:, -(targets.shape[1] + 1) : -1]
        .float()
    )
    logp = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    advantages = torch.tensor([s.advantage for s in batch.sequences], device=policy.device)
    advantages = advantages[:, None]
    loss = -(torch.exp(logp - logp.detach()) * advantages * target_mask).sum() / target_mask.sum()
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0)
    optimizer.step()
    return int(target_mask.sum())


def measure(
    model_dir: Path,
    prompts: int,
    n: int,
    max_new: int,
    repeats: int,
    device: str = "cpu",
    dtype: str = "float32",
    autocast: str | None = None,
    levers: tuple[str, ...] = (),
    rounds: int = 7,
    top_p: float = 1.0,
) -> dict:
    options = HFPolicyOptions(
        generation_batch_size=prompts * n,
        device=device,
        dtype=dtype,
        autocast=autocast,
        lr=1e-4,  # the rate does not change the timing; bf16 weights refuse smaller ones
    )
    policy = HFPolicy(model_dir, options=options)
    texts = [policy.format_prompt(p) for p in PROBLEMS[:prompts]]
    sampling = SamplingParams(max_new_tokens=max_new, seed=0)

    def ours_generate() -> int:
        return sum(len(g.token_ids) for group in policy.generate(texts, n, sampling) for g in group)

    batch = _train_batch(policy, texts, n, max_new)
    loss_fn = algorithms.make("grpo").loss
    bare_optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-6)
    results = {}
    for label, ours, bare in (
        ("generation", ours_generate, lambda: _bare_generate(policy, texts, n, max_new)),
        (
            "training",
            lambda: int(policy.update(batch, loss_fn)["tokens"]),
            lambda: _bare_train_step(policy, batch, bare_optimizer),
        ),
    ):
        timings = {"policy": (float("inf"), 0), "bare": (float("inf"), 0)}
        for _ in range(repeats):  # interleave so load spikes hit both alike
            for name, run in (("policy", ours), ("bare", bare)):
                with policy.compute_precision():  # the bare calls under the same autocast
                    seconds, tokens = _timed(run, device)
                timings[name] = (min(timings[name][0], seconds), tokens)
        rates = {name: tokens / seconds for name, (seconds, tokens) in timings.items()}
        results[label] = {
            "policy_tokens_per_s": rates["policy"],
            "bare_tokens_per_s": rates["bare"],
            "overhead": rates["bare"] / rates["policy"] - 1.0,
        }
    if levers:
        nucleus = SamplingParams(top_p=top_p, max_new_tokens=max_new, seed=0)
        results["levers"] = measure_levers(policy, texts, n, nucleus, list(levers), rounds)
    return results


def _agreement(plain: list[Generation], mine: list[Generation]) -> tuple[int, float]:
    """How many rows drew the same tokens, and the largest log-prob shift over the tokens
    each row's two samples share before they first differ."""
    same, shift = 0, 0.0
    for a, b in zip(plain, mine, strict=True):
        same += a.token_ids == b.token_ids
        common = next(
            (i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids, strict=False)) if x != y),
            min(len(a.token_ids), len(b.token_ids)),
        )
        gap = abs(a.logprobs[:common] - b.logprobs[:common])
        shift = max(shift, float(gap.max(initial=0.0)))
    return same, shift


def measure_levers(
    policy: HFPolicy,
    texts: list[str],
    n: int,
    sampling: SamplingParams,
    levers: list[str],
    rounds: int,
) -> dict:
    """Generation tokens/s per lever and its per-round speed-up over the plain policy."""
    names = ["plain", *levers]
    seconds: dict[str, list[float]] = {name: [] for name in names}
    outputs: dict[str, list[Generation]] = {}
    for name in names:
        with lever(policy, name):
            policy.generate(texts[:1], 1, dataclasses.replace(sampling, max_new_tokens=2))
    for _ in range(rounds):  # alternate, so a load spike hits one round of every lever
        for name in names:
            with lever(policy, name):
                started = time.perf_counter()
                groups = policy.generate(texts, n, sampling)
                synchronize(policy.device)
                seconds[name].append(time.perf_counter() - started)
            outputs[name] = [g for group in groups for g in group]
    tokens = {name: sum(len(g.token_ids) for g in out) for name, out in outputs.items()}
    results = {}
    for name in names:
        ratios = [p / s for p, s in zip(seconds["plain"], seconds[name], strict=True)]
        plain, mine = outputs["plain"], outputs[name]
        same_rows, shift = _agreement(plain, mine)
        results[name] = {
            "tokens_per_s": tokens[name] / min(seconds[name]),
            "speedup_median": statistics.median(ratios),
            "speedup_range": [min(ratios), max(ratios)],
            "same_tokens": same_rows == len(plain),
            "same_rows": [same_rows, len(plain)],
            "max_logprob_shift": shift,
        }
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model dir (default: random)")
    parser.add_argument(
        "--shape", default="tiny", choices=["tiny", "smollm2"], help="of the random model"
    )
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    add_threads_option(parser)
    parser.add_argument("--device", default="cpu", help='torch device ("cpu", "cuda", ...)')
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--autocast", default=None, choices=["bfloat16"], help="mixed precision")
    parser.add_argument(
        "--levers", default="", help=f"comma-separated decoding levers to measure: {LEVERS}"
    )
    parser.add_argument("--top-p", type=float, default=1.0, help="top-p of the lever runs")
    parser.add_argument("--rounds", type=int, default=7, help="alternated rounds of the levers")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    levers = [name for name in args.levers.split(",") if name]
    unknown = sorted(set(levers) - set(LEVERS))
    if unknown:
        parser.error(f"unknown lever(s) {unknown}; valid: {list(LEVERS)}")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = args.model or _random_model(Path(scratch) / args.shape, args.shape)
        results = measure(
            model_dir,
            args.prompts,
            args.n,
            args.max_new_tokens,
            args.repeats,
            device=args.device,
            dtype=args.dtype,
            autocast=args.autocast,
            levers=tuple(levers),
            rounds=args.rounds,
            top_p=args.top_p,
        )
    print(f"{'':<12}{'policy tok/s':>14}{'bare tok/s':>14}{'overhead':>10}")
    for label in ("generation", "training"):
        row = results[label]
        print(
            f"{label:<12}{row['policy_tokens_per_s']:>14.0f}{row['bare_tokens_per_s']:>14.0f}"
            f"{row['overhead']:>10.1%}"
        )
    for name, row in results.get("levers", {}).items():
        low, high = row["speedup_range"]
        print(
            f"lever {name:<15}{row['tokens_per_s']:>8.0f} tok/s  "
            f"speed-up {row['speedup_median']:.2f} ({low:.2f}-{high:.2f})  "
            f"same tokens in {row['same_rows'][0]} of {row['same_rows'][1]} rows, "
            f"log-prob shift {row['max_logprob_shift']:.1e} before any difference"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
