"""GPU check of the transformers policy path, reported as numbers.

CPU CI never runs CUDA, so nothing else exercises `HFPolicy` on a GPU: left-padded
prefill and the KV-cache sampling loop under CUDA kernels, bfloat16 weights, the
CUDA random generator, re-tokenised peer scoring, AdamW steps and checkpoints.
For each precision (float32; bfloat16 weights; mixed: float32 weights with bfloat16
autocast) and each model — the named ones (`policies.zoo`
names or model directories) and a larger random-init Llama built with
`policies.tiny.models`, saved and loaded through `HFPolicy` like any model — it
records:

- sampling: generation log-probs against `score_tokens` and against the training
  forward (`forward.response_logprobs`, as tests/graft_env/policies/test_hf_sampling.py
  does), max and mean |diff| per token; the same seed twice gives the same tokens;
  generation tokens/s (second, warm call) and peak CUDA memory;
- peer: every model's texts scored by every other model (`score` re-tokenises),
  mean token log-likelihood;
- update: one GRPO update on a fixed batch of those samples (as
  tests/graft_env/policies/test_hf_update.py): loss before/after, share of weights changed,
  seconds; a second update gives update tokens/s and peak memory; on the large
  model also with gradient checkpointing;
- save_load: `save` then `load` leave the log-probs identical (max |diff|).

A failing check records its error string and the rest go on. Generation/score
differences above 1e-3 (float32) or 0.1 (bfloat16) print a WARN line. Results
are written to `--json` after every model, so a timeout still leaves them. This module
runs the checks (`device_checks`) over the models and precisions; `device_summary`
prints the closing table.

    python -m benchmarks.perf.device_check --device cuda --json OUT.json
        [--models tiny-a tiny-b] [--scale-hidden 2048 --scale-layers 16]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

from benchmarks.perf.common import PROBLEMS, add_threads_option
from benchmarks.perf.device_checks import (
    PRECISIONS,
    Case,
    check_checkpointing,
    check_peer,
    check_sampling,
    check_save_load,
    check_update,
    free_memory,
    warn,
)
from benchmarks.perf.device_summary import summary
from graft_env.policies import HFPolicyOptions, load_policy
from graft_env.policies.cache import portable_path
from graft_env.policies.loading import load_tokenizer
from graft_env.policies.tiny.models import TinyShape, build_model
from graft_env.policies.zoo import model_path

SCALE_NAME = "scale-llama"


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
        free_memory(device)
        return False


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
            warn(results["warnings"], f"{precision} {case.name}: update {update}")
        if save_load.get("identical") is False:
            gap = save_load["max_abs_diff"]
            warn(
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
    free_memory(args.device)


def _write(args: argparse.Namespace, results: dict) -> None:
    if args.json:
        args.json.write_text(json.dumps(_portable(results), indent=2))


def _portable(value: Any) -> Any:
    """`value` with every absolute path under the cache or temporary directory written
    `$GRAFT_CACHE_DIR/...` / `$TMPDIR/...` (`portable_path`): a results file is committed."""
    if isinstance(value, dict):
        return {key: _portable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_portable(item) for item in value]
    return portable_path(value) if isinstance(value, str) and value.startswith("/") else value


def run(args: argparse.Namespace) -> dict:
    cuda = torch.device(args.device).type == "cuda"
    results: dict = {
        "environment": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "device": torch.cuda.get_device_name(args.device) if cuda else args.device,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        },
        # the --json file by name: where a machine wrote it is not a setting of the check
        "settings": {
            k: (v.name if k == "json" else str(v)) if isinstance(v, Path) else v
            for k, v in vars(args).items()
        },
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
    add_threads_option(parser)
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    transformers.logging.disable_progress_bar()
    summary(run(args))


if __name__ == "__main__":
    main()
