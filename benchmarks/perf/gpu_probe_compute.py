"""`gpu_probes`' single-process probes: (c) what the caching allocator keeps reserved around
an update and what `empty_cache` returns, (d) per-request generators against one batched
draw for sampling, (e) a worker-group rank's update and scoring rate at the paper's token
counts (the rate the step estimate rests on).

(c) `memory_around_update`: a Qwen3 model from its transformers config, random init,
float32 weights and AdamW, bf16 autocast and gradient checkpointing as the paper's agents;
one update of `rows` x `tokens` through the project's forward (`forward.response_logprobs`,
chunked logits): allocated / reserved / peak after load, after the update (gradients set
to None) and after `empty_cache` + `ipc_collect`. CUDA only: the CPU has no caching allocator.

(d) `sampling_draws`: one decode step's draw from `rows` x `vocab` probabilities, vLLM's way
(exponential race: argmax(p / q), q ~ Exp(1)): with one generator per request (one small
kernel per row, what a seeded request sends vLLM's CUDA sampler down) against one batched
draw. Timed alternately; the per-request path is checked to repeat its tokens when reseeded.

(e) `rank_rate`: `worker_group_rank.DirectRank` (what `RankWorker` calls, no Ray) at world
size 1 on a Qwen3-1.7B shape with its 151,936-token vocabulary (`random_models.paper_config`,
no download), the Qwen3 agent's options from the paper config (`worker_group_sizes`): one
paper minibatch (32 prompts x 8, the length mix) updated, then 16 peer rows of 512 + 4,096
tokens scored. FLOPs per row as the step estimate counts them
(`step_time.anchors.forward_flops_per_token`, summed over the row's positions): `executed`
is the update's passes (`step_time.phases.update_s`: 3, +1 with gradient checkpointing,
+1 for the two-pass loss) and is what compares with the estimate's measured rate (A3,
`MEASURED.flops_per_s`); MFU counts 3 passes (forward + backward) against the GPU's dense
bf16 peak. `--smoke` runs (d) and (e) on CPU at toy sizes (`worker_group_sizes.SMOKE`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from algorithms.training.memory_plan import GIB, Architecture


def _memory(torch: Any) -> dict[str, float]:
    torch.cuda.synchronize()
    return {
        "allocated_gib": torch.cuda.memory_allocated() / GIB,
        "reserved_gib": torch.cuda.memory_reserved() / GIB,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
    }


def memory_around_update(config: Any, rows: int, tokens: int, chunk: int) -> dict:
    """(c): the allocator's figures around one update of `rows` rows of `tokens` tokens."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from graft_env.policies.forward import response_logprobs

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.gradient_checkpointing_enable()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    phases = {"loaded": _memory(torch)}
    rng = np.random.default_rng(0)
    prompt, response = tokens // 8, tokens - tokens // 8
    prompts = [rng.integers(4, config.vocab_size, prompt).tolist() for _ in range(rows)]
    responses = [rng.integers(4, config.vocab_size, response).tolist() for _ in range(rows)]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        result = response_logprobs(
            model, prompts, responses, pad_id=0, temperature=1.0, logits_chunk_tokens=chunk
        )
    (-result.logprobs.sum() / result.mask.sum()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del result
    phases["after_update"] = _memory(torch)
    torch.cuda.empty_cache()
    torch.cuda.ipc_collect()
    phases["after_empty_cache"] = _memory(torch)
    held = phases["after_update"]["reserved_gib"] - phases["after_update"]["allocated_gib"]
    returned = phases["after_update"]["reserved_gib"] - phases["after_empty_cache"]["reserved_gib"]
    return {
        "rows": rows,
        "tokens_per_row": tokens,
        "phases": phases,
        "reserved_not_allocated_after_update_gib": held,
        "returned_by_empty_cache_gib": returned,
    }


def _race_draw(torch: Any, probs: Any, generators: list) -> Any:
    """vLLM's random sampling: argmax(p / q), q ~ Exp(1), q drawn row by row from each
    request's generator, or all at once from one."""
    q = torch.empty_like(probs)
    if len(generators) == 1:
        q.exponential_(generator=generators[0])
    else:
        for row, generator in enumerate(generators):
            q[row].exponential_(generator=generator)
    return probs.div(q).argmax(-1)


def sampling_draws(device: str, rows: int, vocab: int, steps: int, budget_s: float) -> dict:
    """(d): seconds per draw with `rows` generators against one, alternating, at most
    `steps` draws each and within `budget_s`."""
    import torch

    from benchmarks.perf.common import synchronize

    generator = torch.Generator(device=device).manual_seed(0)
    logits = torch.randn(rows, vocab, device=device, generator=generator)
    probs = torch.softmax(logits, -1)

    def seeded() -> list:
        return [torch.Generator(device=device).manual_seed(1000 + r) for r in range(rows)]

    per_request, batched = seeded(), [torch.Generator(device=device).manual_seed(1)]
    repeats = bool(
        torch.equal(_race_draw(torch, probs, seeded()), _race_draw(torch, probs, seeded()))
    )
    times: dict[str, list[float]] = {"per_request_s": [], "batched_s": []}
    deadline = time.perf_counter() + budget_s
    for _ in range(steps):
        for key, generators in (("per_request_s", per_request), ("batched_s", batched)):
            synchronize(device)
            started = time.perf_counter()
            _race_draw(torch, probs, generators)
            synchronize(device)
            times[key].append(time.perf_counter() - started)
        if time.perf_counter() > deadline:
            break
    median = {key: sorted(values)[len(values) // 2] for key, values in times.items()}
    return {
        "rows": rows,
        "vocab": vocab,
        "draws_each": len(times["batched_s"]),
        **median,
        "per_request_over_batched": median["per_request_s"] / max(median["batched_s"], 1e-9),
        "per_request_repeats_when_reseeded": repeats,
    }


def _row_flops(arch: Architecture, length: int) -> float:
    """One forward of a `length`-token row, as the step estimate counts it."""
    from algorithms.training.step_time.anchors import forward_flops_per_token

    return length * forward_flops_per_token(arch, (length - 1) / 2)


def _rates(
    arch: Architecture, lengths: list[int], seconds: float, passes: int, peak: float | None
) -> dict:
    forward = sum(_row_flops(arch, length) for length in lengths)
    executed = passes * forward / seconds
    model_passes = 3 if passes > 1 else 1
    return {
        "seconds": seconds,
        "tokens": sum(lengths),
        "tokens_per_s": sum(lengths) / seconds,
        "passes": passes,
        "executed_tflop_per_s": executed / 1e12,
        "mfu": None if peak is None else model_passes * forward / seconds / peak,
    }


def rank_rate(device: str, smoke: bool, peak_flops: float | None) -> dict:
    """(e): the rank's update of one paper minibatch and its scoring of the peer rows."""
    import torch.distributed as dist

    from algorithms.training.step_time.anchors import MEASURED
    from benchmarks.perf.common import synchronize
    from benchmarks.perf.random_models import (
        TOY_QWEN3,
        config_of,
        paper_config,
        write_random_model,
    )
    from benchmarks.perf.worker_group_rank import DirectRank, set_up
    from benchmarks.perf.worker_group_sizes import (
        FULL,
        MODEL,
        SMOKE,
        exact_batch,
        mix_batch,
        options_for,
        update_estimate_s,
    )

    size = SMOKE if smoke else FULL
    config = config_of("Qwen3Config", TOY_QWEN3) if smoke else paper_config(MODEL)
    arch = Architecture.from_config(config.to_dict())
    options = options_for(size, device)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-probe-rank-"))
    rank = DirectRank()
    try:
        write_random_model(scratch, config, seed=0, device=device)
        set_up(rank, scratch, options)
        vocab = arch.vocab_size
        rank.update(exact_batch(vocab, 1, size.warm_rows, 8, size.warm_tokens, seed=1))
        paper = mix_batch(vocab, size.paper_prompts, size.n, size.mix, seed=3)
        started = time.perf_counter()
        metrics = rank.update(paper)
        synchronize(device)
        update_seconds = time.perf_counter() - started
        peers = exact_batch(
            vocab, size.peer_rows, 1, size.peak_prompt_tokens, size.peak_response_tokens, seed=2
        )
        texts = [" ".join(f"t{i}" for i in s.response_token_ids) for s in peers.sequences]
        prompts = [peers.prompts[s.prompt_index] for s in peers.sequences]
        started = time.perf_counter()
        rank.score(prompts, texts, ["length"] * len(texts))
        synchronize(device)
        score_seconds = time.perf_counter() - started
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        shutil.rmtree(scratch, ignore_errors=True)
    lengths = [
        len(paper.prompts[s.prompt_index].split()) + len(s.response_token_ids)
        for s in paper.sequences
    ]
    passes = (4 if options.get("gradient_checkpointing") else 3) + 1
    update = _rates(arch, lengths, update_seconds, passes, peak_flops)
    update["padding_share"] = metrics.get("padding_share")
    update["estimate_s"] = update_estimate_s(arch, options, size, peak=False)
    score_lengths = [size.peak_prompt_tokens + size.peak_response_tokens] * len(texts)
    return {
        "model": "qwen3 (smoke size)" if smoke else MODEL,
        "parameters": arch.params,
        "vocab": arch.vocab_size,
        "update": update,
        "score": _rates(arch, score_lengths, score_seconds, 1, peak_flops),
        "estimate_tflop_per_s": MEASURED.flops_per_s / 1e12,
    }
