"""The checks of `device_check`, each on one model (a `Case`) at one precision.

What each one records is listed in `device_check`'s docstring; every timing waits for
the device (`common.synchronize`) and, on CUDA, also reports the call's peak memory.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

import algorithms
from benchmarks.perf.common import grpo_batch, synchronize
from graft_env.policies import HFPolicy, HFPolicyOptions, SamplingParams
from graft_env.policies.base import Generation
from graft_env.policies.forward import response_logprobs

# precision -> the policy options that select it (mixed: float32 master weights)
PRECISIONS = {
    "float32": {"dtype": "float32"},
    "bfloat16": {"dtype": "bfloat16"},
    "mixed": {"dtype": "float32", "autocast": "bfloat16"},
}
TOLERANCE = {"float32": 1e-3, "bfloat16": 0.1, "mixed": 0.1}  # |generation - score| per token


@dataclass
class Case:
    """One model under one precision: its policy, formatted prompts, samples and report."""

    name: str
    policy: HFPolicy | None
    prompts: list[str]
    report: dict = field(default_factory=dict)
    groups: list[list[Generation]] | None = None


def _measure(run: Callable[[], object], device: str, label: str) -> tuple[object, dict]:
    """(result, {label_s: seconds}), and on CUDA label_peak_gib (peak allocated during the
    call) and label_extra_gib (that peak less what was allocated before it)."""
    cuda = torch.device(device).type == "cuda"
    synchronize(device)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    started = time.perf_counter()
    result = run()
    synchronize(device)
    numbers = {f"{label}_s": time.perf_counter() - started}
    if cuda:
        peak = torch.cuda.max_memory_allocated(device)
        numbers.update(
            {f"{label}_peak_gib": peak / 2**30, f"{label}_extra_gib": (peak - before) / 2**30}
        )
    return result, numbers


def free_memory(device: str) -> None:
    """Drop unreferenced tensors (and on CUDA the cached blocks), so the next peak is its own."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _diff(a: list[np.ndarray], b: list[np.ndarray]) -> dict[str, float]:
    gaps = np.concatenate(
        [np.abs(np.asarray(x, np.float64) - y) for x, y in zip(a, b, strict=True)]
    )
    return {"max": float(gaps.max()), "mean": float(gaps.mean())}


def warn(warnings: list[str], message: str) -> None:
    """Print `message` now and keep it in `warnings` for the summary."""
    warnings.append(message)
    print(f"WARN {message}")


def _flat(case: Case) -> tuple[list[str], list[Generation]]:
    pairs = [(p, g) for p, group in zip(case.prompts, case.groups, strict=True) for g in group]
    return [p for p, _ in pairs], [g for _, g in pairs]


def check_sampling(
    case: Case, args: argparse.Namespace, precision: str, warnings: list[str]
) -> dict:
    policy = case.policy
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, seed=args.seed)
    first, cold = _measure(
        lambda: policy.generate(case.prompts, args.n, sampling), args.device, "generate_cold"
    )
    again, warm = _measure(
        lambda: policy.generate(case.prompts, args.n, sampling), args.device, "generate"
    )
    case.groups = first
    prompts, gens = _flat(case)
    ids = [g.token_ids for g in gens]
    repeat_ids = [g.token_ids for group in again for g in group]
    scored = policy.score_tokens(prompts, ids)
    with torch.no_grad(), policy.compute_precision():  # the precision `update` computes in
        trained = response_logprobs(
            policy.model,
            [policy.encode_prompt(p) for p in prompts],
            ids,
            pad_id=policy.pad_id,
            temperature=policy.temperature,
        ).logprobs
    trained = [row[: len(i)] for row, i in zip(trained.float().cpu().numpy(), ids, strict=True)]
    logprobs = [g.logprobs for g in gens]
    tokens = sum(len(i) for i in ids)
    result = {
        "sequences": len(gens),
        "tokens": tokens,
        "stopped_share": sum(g.finish_reason == "stop" for g in gens) / len(gens),
        "generation_vs_score": _diff(logprobs, scored),
        "generation_vs_train_forward": _diff(logprobs, trained),
        "deterministic": ids == repeat_ids,
        "rows_differing": sum(a != b for a, b in zip(ids, repeat_ids, strict=True)),
        "generation_tokens_per_s": tokens / warm["generate_s"],
        **cold,
        **warm,
    }
    for key in ("generation_vs_score", "generation_vs_train_forward"):
        if result[key]["max"] > TOLERANCE[precision]:
            gap = result[key]["max"]
            warn(
                warnings, f"{precision} {case.name} {key} max {gap:.3g} > {TOLERANCE[precision]:g}"
            )
    if not result["deterministic"]:
        warn(
            warnings, f"{precision} {case.name}: same seed, {result['rows_differing']} rows differ"
        )
    return result


def check_peer(source: Case, target: Case) -> dict:
    """`source`'s texts scored by `target` on its own prompt template and tokenizer."""
    by_problem = {p: t for p, t in zip(source.prompts, target.prompts, strict=True)}
    prompts, gens = _flat(source)
    scored = target.policy.score(
        [by_problem[p] for p in prompts], [g.text for g in gens], [g.finish_reason for g in gens]
    )
    logprobs = np.concatenate([s.logprobs for s in scored])
    return {
        "sequences": len(scored),
        "target_tokens": int(logprobs.size),
        "target_mean_token_logp": float(logprobs.mean()),
        "source_mean_token_logp": float(np.concatenate([g.logprobs for g in gens]).mean()),
        "finite": bool(np.isfinite(logprobs).all()),
    }


def _batch_loss(policy: HFPolicy, batch, loss_fn) -> float:
    """The GRPO loss of `batch` under the current weights (no grad), as the tests compute it."""
    prompts = [batch.prompts[s.prompt_index] for s in batch.sequences]
    scored = policy.score_tokens(prompts, [s.response_token_ids for s in batch.sequences])
    width = max(len(row) for row in scored)
    new_logp = torch.tensor(np.stack([np.pad(row, (0, width - len(row))) for row in scored]))
    return float(loss_fn(new_logp, batch.sequences)[0])


def check_update(case: Case, device: str) -> dict:
    policy, loss_fn = case.policy, algorithms.make("grpo").loss
    batch = grpo_batch(policy.name, case.prompts, case.groups)
    before_params = [p.detach().clone() for p in policy.model.parameters()]
    before = _batch_loss(policy, batch, loss_fn)
    metrics, cold = _measure(lambda: policy.update(batch, loss_fn), device, "update_cold")
    after = _batch_loss(policy, batch, loss_fn)
    changed = sum(
        int((a != b).sum()) for a, b in zip(before_params, policy.model.parameters(), strict=True)
    )
    total = sum(p.numel() for p in before_params)
    del before_params
    result = {
        "loss_before": before,
        "loss_after": after,
        "lowered": after < before,
        "first_minibatch_loss": metrics["loss"],
        "grad_norm": metrics["grad_norm"],
        "changed_weight_share": changed / total,
        "update_cold_s": cold["update_cold_s"],
    }
    result.update(_timed_update(policy, batch, device))
    return result


def _timed_update(policy: HFPolicy, batch, device: str) -> dict:
    """A further (warm: optimiser state exists) update: seconds, tokens/s, peak memory."""
    loss_fn = algorithms.make("grpo").loss
    metrics, warm = _measure(lambda: policy.update(batch, loss_fn), device, "update")
    return {"update_tokens_per_s": metrics["tokens"] / warm["update_s"], **warm}


def check_save_load(case: Case, scratch: Path, device: str) -> dict:
    policy = case.policy
    prompts, gens = _flat(case)
    ids = [g.token_ids for g in gens]
    before = policy.score_tokens(prompts, ids)
    directory = scratch / f"ckpt-{case.name}"
    _, save = _measure(lambda: policy.save(directory), device, "save")
    size = sum(f.stat().st_size for f in directory.iterdir())
    _, load = _measure(lambda: policy.load(directory), device, "load")
    shutil.rmtree(directory)
    gap = _diff(before, policy.score_tokens(prompts, ids))["max"]
    return {
        "max_abs_diff": gap,
        "identical": gap == 0.0,
        "save_s": save["save_s"],
        "load_s": load["load_s"],
        "checkpoint_gib": size / 2**30,
    }


def check_checkpointing(case: Case, options: dict, device: str) -> dict:
    """The large model's update with gradient checkpointing (fresh policy, same batch)."""
    path = case.policy.path
    case.policy = None  # free the plain copy first, so the peak is this variant's own
    free_memory(device)
    settings = HFPolicyOptions.from_kwargs(**options, gradient_checkpointing=True)
    policy = HFPolicy(path, name=case.name, options=settings)
    batch = grpo_batch(policy.name, case.prompts, case.groups)
    metrics, cold = _measure(
        lambda: policy.update(batch, algorithms.make("grpo").loss), device, "update_cold"
    )
    return {
        "first_minibatch_loss": metrics["loss"],  # same weights and batch as the plain update:
        "grad_norm": metrics["grad_norm"],  # both should match it up to float rounding
        "update_cold_s": cold["update_cold_s"],
        **_timed_update(policy, batch, device),
    }
