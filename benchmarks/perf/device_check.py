"""GPU check of the transformers policy path, reported as numbers.

CPU CI never runs CUDA, so nothing else exercises `HFPolicy` on a GPU: left-padded
prefill and the KV-cache sampling loop under CUDA kernels, bfloat16 weights, the
CUDA random generator, re-tokenised peer scoring, AdamW steps and checkpoints.
For each precision (float32; bfloat16 weights; mixed: float32 weights with bfloat16
autocast) and each model — the named ones (`policies.zoo`
names or model directories) and a larger random-init Llama built with
`policies.tiny_models`, saved and loaded through `HFPolicy` like any model — it
records:

- sampling: generation log-probs against `score_tokens` and against the training
  forward (`forward.response_logprobs`, as tests/policies/test_hf_sampling.py
  does), max and mean |diff| per token; the same seed twice gives the same tokens;
  generation tokens/s (second, warm call) and peak CUDA memory;
- peer: every model's texts scored by every other model (`score` re-tokenises),
  mean token log-likelihood;
- update: one GRPO update on a fixed batch of those samples (as
  tests/policies/test_hf_update.py): loss before/after, share of weights changed,
  seconds; a second update gives update tokens/s and peak memory; on the large
  model also with gradient checkpointing;
- save_load: `save` then `load` leave the log-probs identical (max |diff|).

A failing check records its error string and the rest go on. Generation/score
differences above 1e-3 (float32) or 0.1 (bfloat16) print a WARN line. Results
are written to `--json` after every model, so a timeout still leaves them.

    python -m benchmarks.perf.device_check --device cuda --json OUT.json
        [--models tiny-a tiny-b] [--scale-hidden 2048 --scale-layers 16]
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import transformers

import algorithms
from benchmarks.perf.policy_throughput import PROBLEMS, grpo_batch, synchronize
from graft_env.policies import HFPolicy, HFPolicyOptions, SamplingParams, load_policy
from graft_env.policies.base import Generation
from graft_env.policies.forward import response_logprobs
from graft_env.policies.hf_options import load_tokenizer
from graft_env.policies.tiny_models import TinyShape, build_model
from graft_env.policies.zoo import model_path

# precision -> the policy options that select it (mixed: float32 master weights)
PRECISIONS = {
    "float32": {"dtype": "float32"},
    "bfloat16": {"dtype": "bfloat16"},
    "mixed": {"dtype": "float32", "autocast": "bfloat16"},
}
TOLERANCE = {"float32": 1e-3, "bfloat16": 0.1, "mixed": 0.1}  # |generation - score| per token
SCALE_NAME = "scale-llama"


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


def _free(device: str) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _guarded(report: dict, key: str, device: str, check: Callable[..., dict], *args) -> bool:
    """`report[key] = check(*args)`; on any error record it there instead and go on."""
    print(f"  {key}", flush=True)
    try:
        report[key] = check(*args)
        return True
    except Exception as err:  # one failing check must not stop the rest
        report[key] = {"error": f"{type(err).__name__}: {err}"}
        print(f"ERROR {key}: {type(err).__name__}: {err}")
        traceback.print_exc()
        _free(device)
        return False


def _diff(a: list[np.ndarray], b: list[np.ndarray]) -> dict[str, float]:
    gaps = np.concatenate(
        [np.abs(np.asarray(x, np.float64) - y) for x, y in zip(a, b, strict=True)]
    )
    return {"max": float(gaps.max()), "mean": float(gaps.mean())}


def _warn(warnings: list[str], message: str) -> None:
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
            _warn(
                warnings, f"{precision} {case.name} {key} max {gap:.3g} > {TOLERANCE[precision]:g}"
            )
    if not result["deterministic"]:
        _warn(
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
    _free(device)
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


def _scale_model(directory: Path, tokenizer_from: str, args: argparse.Namespace) -> dict:
    """A random-init Llama of the asked width/depth with another model's tokenizer, saved
    to `directory` to be loaded like any model."""
    started = time.perf_counter()
    tokenizer_from = str(model_path(tokenizer_from))
    tokenizer = load_tokenizer(tokenizer_from, HFPolicyOptions())
    heads = max(1, args.scale_hidden // 128)
    shape = TinyShape(args.scale_hidden, args.scale_layers, heads, max_positions=1024)
    with torch.device(args.device):  # random init on the device is much faster for big shapes
        model = build_model(
            "llama",
            len(tokenizer),
            tokenizer.eos_token_id,
            tokenizer.pad_token_id,
            shape,
            seed=args.seed,
        )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return {
        "path": str(directory),
        "parameters": sum(p.numel() for p in model.parameters()),
        "shape": vars(shape),
        "tokenizer_from": tokenizer_from,
        "seconds": time.perf_counter() - started,
    }


def _sources(args: argparse.Namespace, scratch: Path, results: dict) -> dict[str, str]:
    """Model name -> what to load it from (a zoo name or a directory); builds the large
    model (its tokenizer from the first model) when asked for."""
    sources = {name: name for name in args.models}
    if args.scale_layers > 0 and sources:
        scale = scratch / SCALE_NAME
        if _guarded(results, "scale_build", args.device, _scale_model, scale, args.models[0], args):
            sources[SCALE_NAME] = str(scale)
    return sources


def _load_case(name: str, source: str, options: dict, args: argparse.Namespace) -> Case:
    policy = load_policy(source, **options)
    prompts = [policy.format_prompt(p) for p in PROBLEMS[: args.prompts]]
    case = Case(name, policy, prompts)
    case.report["parameters"] = sum(p.numel() for p in policy.model.parameters())
    return case


def check_precision(
    precision: str, sources: dict[str, str], args: argparse.Namespace, results: dict, scratch: Path
) -> None:
    """Every check for every model at `precision` (a PRECISIONS key), into `results[precision]`."""
    options = {"device": args.device, "lr": args.lr, **PRECISIONS[precision]}
    report = results[precision] = {"models": {}, "peer": {}}
    cases: list[Case] = []
    for name, source in sources.items():
        print(f"[{precision}] {name}", flush=True)
        loaded: dict = {}
        if not _guarded(loaded, "load", args.device, _load_case, name, source, options, args):
            report["models"][name] = loaded
            continue
        case = loaded["load"]
        report["models"][name] = case.report
        print(f"  {case.report['parameters']:,} parameters", flush=True)
        if _guarded(
            case.report,
            "sampling",
            args.device,
            check_sampling,
            case,
            args,
            precision,
            results["warnings"],
        ):
            cases.append(case)
        _write(args, results)
    for source in cases:
        for target in cases:
            if target is not source:
                key = f"{source.name}->{target.name}"
                _guarded(report["peer"], key, args.device, check_peer, source, target)
    _write(args, results)
    for case in cases:
        print(f"[{precision}] {case.name}", flush=True)
        _guarded(case.report, "update", args.device, check_update, case, args.device)
        _guarded(case.report, "save_load", args.device, check_save_load, case, scratch, args.device)
        update, save_load = case.report["update"], case.report["save_load"]
        if update.get("lowered") is False or update.get("changed_weight_share") == 0:
            _warn(results["warnings"], f"{precision} {case.name}: update {update}")
        if save_load.get("identical") is False:
            gap = save_load["max_abs_diff"]
            _warn(
                results["warnings"],
                f"{precision} {case.name}: save/load changed log-probs {gap:.3g}",
            )
        if case.name == SCALE_NAME:
            _guarded(
                case.report,
                "gradient_checkpointing",
                args.device,
                check_checkpointing,
                case,
                options,
                args.device,
            )
        _write(args, results)
    cases.clear()
    _free(args.device)


def _write(args: argparse.Namespace, results: dict) -> None:
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def run(args: argparse.Namespace) -> dict:
    cuda = torch.device(args.device).type == "cuda"
    results: dict = {
        "environment": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "device": torch.cuda.get_device_name(args.device) if cuda else args.device,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        },
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "warnings": [],
    }
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="device-check-"))
    try:
        sources = _sources(args, scratch, results)
        for precision in args.precisions:
            check_precision(precision, sources, args, results, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        results["total_s"] = time.perf_counter() - started
        _write(args, results)
    return results


def _cell(entry: dict, check: str, *keys: str, fmt: str = "{:.3g}") -> str:
    """One summary cell: "-" if the check did not run, "ERR" if it failed."""
    value = entry.get(check)
    if value is None:
        return "-"
    if "error" in value:
        return "ERR"
    for key in keys:
        value = value.get(key)
    if value is None:
        return "-"
    return str(value) if isinstance(value, bool) else fmt.format(value)


def _summary(results: dict) -> None:
    print(
        f"\n{'precision':<10}{'model':<13}{'gen~score':>10}{'gen~train':>10}{'same':>6}"
        f"{'loss before -> after':>22}{'ckpt diff':>10}{'gen tok/s':>10}{'upd tok/s':>10}"
        f"{'gen GiB':>8}{'upd GiB':>8}"
    )
    for precision in PRECISIONS:
        for name, entry in results.get(precision, {}).get("models", {}).items():
            loss = (
                f"{_cell(entry, 'update', 'loss_before', fmt='{:.4f}')} -> "
                f"{_cell(entry, 'update', 'loss_after', fmt='{:.4f}')}"
            )
            print(
                f"{precision:<10}{name:<13}"
                f"{_cell(entry, 'sampling', 'generation_vs_score', 'max'):>10}"
                f"{_cell(entry, 'sampling', 'generation_vs_train_forward', 'max'):>10}"
                f"{_cell(entry, 'sampling', 'deterministic'):>6}{loss:>22}"
                f"{_cell(entry, 'save_load', 'max_abs_diff'):>10}"
                f"{_cell(entry, 'sampling', 'generation_tokens_per_s', fmt='{:.0f}'):>10}"
                f"{_cell(entry, 'update', 'update_tokens_per_s', fmt='{:.0f}'):>10}"
                f"{_cell(entry, 'sampling', 'generate_peak_gib', fmt='{:.2f}'):>8}"
                f"{_cell(entry, 'update', 'update_peak_gib', fmt='{:.2f}'):>8}"
            )
            if "gradient_checkpointing" in entry:
                print(
                    f"{'':<23}with gradient checkpointing: update "
                    f"{_cell(entry, 'gradient_checkpointing', 'update_s')} s, "
                    f"{_cell(entry, 'gradient_checkpointing', 'update_peak_gib', fmt='{:.2f}')}"
                    f" GiB peak (plain: {_cell(entry, 'update', 'update_s')} s)"
                )
        for pair, row in results.get(precision, {}).get("peer", {}).items():
            value = row.get("target_mean_token_logp")
            print(
                f"{precision:<10}peer {pair}: mean token log-lik "
                f"{'ERR' if value is None else f'{value:.3f}'}"
            )
    for warning in results["warnings"]:
        print(f"WARN {warning}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help='torch device ("cpu", "cuda", ...)')
    parser.add_argument(
        "--models", nargs="+", default=["tiny-a", "tiny-b"], help="zoo names or model directories"
    )
    parser.add_argument("--scale-hidden", type=int, default=2048)
    parser.add_argument("--scale-layers", type=int, default=16, help="0: no large model")
    parser.add_argument(
        "--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS)
    )
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-4, help="AdamW lr of the update check")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    transformers.logging.disable_progress_bar()
    _summary(run(args))


if __name__ == "__main__":
    main()
