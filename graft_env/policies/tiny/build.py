"""The built-in tiny heterogeneous pair: `tiny-a` and `tiny-b`.

Two ~1M-parameter causal LMs of different families (GPT-NeoX / Llama) with
different byte-level BPE tokenizers (plain prompts / a ChatML chat template),
warm-started by supervised training on procedural worked solutions with disjoint
skill mixes: A learns addition, multiplication and linear equations, B
subtraction, modular arithmetic and gcd, and each sees only `peer_skill_share`
(5 %) of the other's skills. So each often solves prompts where the other fails
all n samples — the situation GRAFT exploits — within minutes on a CPU.

Their home distribution is procedural difficulty level 1 (`level_weights`):
what ~1M parameters learn in that time. Measured while tuning (one core each,
shared CPU): at the same number of sequences, batch 16 for 2000 steps reached
0.09 nats/token and 20-42 % level-1 pass@1 at temperature 1, batch 32 for 1000
steps only 0.16 and 8-11 %; a GPT-2 member (learned absolute positions) lagged a
GPT-NeoX one (rotary) by ~2x in loss; lr 1e-2 diverged to a worse plateau than
3e-3; levels 2-3 stayed near 0 % within the budget.

The build is a pure function of (config, seed, the procedural generators) and is
cached under a key of all three: a second call loads, never re-trains.

The same builder builds the testbed pair (`testbed-a` / `testbed-b`,
`tiny_config.TESTBED`): a larger peer-skill share, warm-started to per-skill
pass@1 targets (`WarmStartTargets`) instead of for a fixed step count.

    python -m graft_env.policies.tiny.build --out DIR [--seed 0] [--pair testbed-pair]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast

from graft_env.data import Problem
from graft_env.policies.base import SamplingParams
from graft_env.policies.cache import default_cache_dir, kernel_provenance, weights_sha256
from graft_env.policies.generation import sample
from graft_env.policies.hf import HFPolicy
from graft_env.policies.tiny import tokenizer as tiny_tokenizer
from graft_env.policies.tiny.build_files import BUILD_FILE as COMPLETE_FILE
from graft_env.policies.tiny.config import PAIRS, SKILLS, TinyModelSpec, TinyPairConfig, cache_key
from graft_env.policies.tiny.models import build_model
from graft_env.policies.tiny.pools import (
    evaluation_problems,
    key_targets,
    member_index,
    mix_key,
    mix_weights,
    target_problems,
    training_problems,
)
from graft_env.policies.tiny.report import (
    add_skill_mix_summary,
    complementarity_report,
    format_report,
)
from graft_env.policies.tiny.sft import SkillMix, supervised_warm_start
from graft_env.prompts import format_prompt
from graft_env.rewards import verify_batch

REPORT_FILE = "report.json"
TOKENIZER_CORPUS = 4000  # problems the BPE merges are learned from


def _train_tokenizer(spec: TinyModelSpec, problems: list[Problem]) -> PreTrainedTokenizerFast:
    corpus = problems[:TOKENIZER_CORPUS]
    tokenizer = tiny_tokenizer.train_tokenizer(
        (format_prompt(p.problem) + p.extra["solution"] for p in corpus), spec.tokenizer
    )
    if spec.tokenizer.chat_template:  # learn merges on the text the model will really see
        tokenizer = tiny_tokenizer.train_tokenizer(
            (format_prompt(p.problem, tokenizer) + p.extra["solution"] for p in corpus),
            spec.tokenizer,
        )
    return tokenizer


def _skill_pass_at_1(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerFast,
    problems: list[Problem],
    n: int,
    sampling: SamplingParams,
    keys: list[str] | None = None,
) -> dict[str, float]:
    """Mean reward of `n` samples per problem, per skill, or per `keys[i]` for problem i
    (a gap pair's skills and families; the warm start's check)."""
    keys = keys if keys is not None else [p.extra["skill"] for p in problems]
    prompts = [tokenizer(format_prompt(p.problem, tokenizer))["input_ids"] for p in problems]
    sampled = sample(
        model,
        [ids for ids in prompts for _ in range(n)],
        sampling,
        eos_id=tokenizer.eos_token_id,
        pad_id=tokenizer.pad_token_id,
        temperature=sampling.temperature,
        generator=torch.Generator().manual_seed(sampling.seed),
    )
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in sampled.token_ids]
    verdicts = verify_batch(texts, [p.answer for p in problems for _ in range(n)])
    totals: dict[str, list[float]] = {}
    for index, verdict in enumerate(verdicts):
        totals.setdefault(keys[index // n], []).append(verdict.reward)
    return {skill: sum(rewards) / len(rewards) for skill, rewards in totals.items()}


def _target_mix(
    spec: TinyModelSpec,
    config: TinyPairConfig,
    seed: int,
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerFast,
    problems: list[Problem],
    history: list[dict],
) -> SkillMix:
    """The warm start to `config.targets` (see `WarmStartTargets`, and `GapTargets` for a
    gap pair's families: reached, the model's own gap family gets weight 0); every
    check is appended to `history`."""
    targets = config.targets
    goal = key_targets(spec, config)
    base = mix_weights(spec, config, problems)
    held_out = target_problems(config, seed)
    # only a gap pair names keys (the testbed's tests script this check with five arguments)
    keyed = {} if config.gap is None else {"keys": [mix_key(p, config) for p in held_out]}
    families = [k for k in base if k not in SKILLS]
    hold = ()
    if config.gap is not None and config.gap.dose > 0:
        hold = (config.gap.families[member_index(spec, config)],)

    def weights(step: int) -> dict[str, float] | None:
        if step < targets.first_check:
            return base
        sampling = SamplingParams(
            temperature=1.0, top_p=1.0, max_new_tokens=targets.check_max_new_tokens, seed=step
        )
        measured = _skill_pass_at_1(model, tokenizer, held_out, targets.check_n, sampling, **keyed)
        reached = sorted(s for s in base if measured[s] >= goal[s])
        shown = "  ".join(f"{s} {measured[s]:.0%}/{goal[s]:.0%}" for s in base)
        print(f"[{spec.name}] step {step:5d}  pass@1/target  {shown}", flush=True)
        own = [measured[s] for s in spec.skills]
        peer = [measured[s] for s in base if s in SKILLS and s not in spec.skills]
        short = [f for f in families if measured[f] < goal[f]]
        new = None
        if sum(own) / len(own) < targets.own or sum(peer) / len(peer) < targets.peer or short:
            factor = {s: targets.reached_weight if s in reached else 1.0 for s in base}
            factor.update({f: 0.0 for f in hold if f in reached})
            new = {s: w * factor[s] for s, w in base.items()}
        history.append({"step": step, "pass_at_1": measured, "reached": reached, "weights": new})
        return new

    return SkillMix([mix_key(p, config) for p in problems], targets.check_every, weights)


def progress_line(
    name: str, step: int, total: int, loss: float, seconds: float, capped: bool
) -> str:
    """One SFT progress line: steps done of `total`, the loss, the time so far and the time
    left at the mean pace so far. `capped`: `total` is a cap that a warm start to targets
    stops before once they are reached, so the time left is an upper bound ("<="). The
    first step's pace says nothing yet (it holds the start-up): no time left then."""
    done = step + 1
    left = seconds / done * (total - done)
    eta = f"{'<= ' if capped else ''}{_duration(left)}" if step else "-"
    return (
        f"[{name}] step {done:5d}/{total} ({done / total:4.0%})  loss {loss:.4f}  "
        f"{seconds:5.0f}s  left {eta}"
    )


def _duration(seconds: float) -> str:
    """`seconds` as `1h02m`, `4m05s` or `37s`."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _warm_start(
    spec: TinyModelSpec, config: TinyPairConfig, seed: int, directory: Path, threads: int = 1
) -> dict:
    """Tokenizer + model + SFT for one member, saved to `directory` (runs in a worker)."""
    # One core per member by default. Thread counts change float summation orders, so
    # a build with other `threads` is a different build under the same key (as on
    # another CPU): the testbed's targets are what keeps its statistics stable.
    torch.set_num_threads(threads)
    problems = training_problems(spec, config, seed)
    tokenizer = _train_tokenizer(spec, problems)
    eos = tokenizer.eos_token_id
    examples = [
        (
            tokenizer(format_prompt(p.problem, tokenizer))["input_ids"],
            [*tokenizer(p.extra["solution"], add_special_tokens=False)["input_ids"], eos],
        )
        for p in problems
    ]
    model = build_model(
        spec.architecture, len(tokenizer), eos, tokenizer.pad_token_id, config.shape, seed
    )

    def progress(step: int, loss: float, seconds: float) -> None:
        line = progress_line(spec.name, step, config.sft.steps, loss, seconds, mix is not None)
        print(line, flush=True)

    checks: list[dict] = []
    mix = None
    if config.targets is not None:
        mix = _target_mix(spec, config, seed, model, tokenizer, problems, checks)
    started = time.perf_counter()
    losses = supervised_warm_start(
        model,
        examples,
        tokenizer.pad_token_id,
        dataclasses.replace(config.sft, seed=seed),
        progress,
        mix=mix,
    )
    seconds = time.perf_counter() - started
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    info = {
        "seconds": seconds,
        "final_loss": sum(losses[-50:]) / len(losses[-50:]),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
    }
    if mix is not None:
        info.update(steps=len(losses), target_checks=checks)
    return info


def _warm_start_all(
    config: TinyPairConfig, seed: int, staging: Path, workers: int, threads: int
) -> dict:
    """Warm-start every member: in `workers` spawned processes, or here when 0."""
    if workers < 0 or threads < 1:
        raise ValueError(f"need workers >= 0 and threads >= 1, got {workers} and {threads}")
    if workers == 0:
        previous = torch.get_num_threads()
        try:
            return {
                spec.name: _warm_start(spec, config, seed, staging / spec.name, threads)
                for spec in config.models
            }
        finally:
            torch.set_num_threads(previous)
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = {
            spec.name: pool.submit(_warm_start, spec, config, seed, staging / spec.name, threads)
            for spec in config.models
        }
        return {name: future.result() for name, future in futures.items()}


def _model_paths(root: Path, config: TinyPairConfig) -> dict[str, Path]:
    return {spec.name: root / spec.name for spec in config.models}


def build_tiny_pair(
    cache_dir: Path | str | None = None,
    seed: int = 0,
    *,
    config: TinyPairConfig | None = None,
    workers: int = 2,
    threads: int = 1,
    log: Callable[[str], None] = print,
) -> dict[str, Path]:
    """Build (or load from the cache) a tiny pair (default: the tiny pair; `config`:
    e.g. `tiny_config.TESTBED`); returns {model name: model directory}.

    The models train in `workers` processes, `threads` torch threads each (0
    workers: one after the other in this process, same results). `report.json`
    (see `tiny_report.complementarity_report`) and `build.json` (config, key,
    timings) are written next to the model directories.
    """
    config = config or TinyPairConfig()
    key = cache_key(config, seed)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / f"{config.name}-{key}"
    if (target / COMPLETE_FILE).is_file():
        return _model_paths(target, config)
    staging = root / f".{config.name}-{key}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    minutes = "5-10" if config.targets is None else "6-10"
    log(
        f"building {config.name} ({', '.join(s.name for s in config.models)}; key {key}, seed "
        f"{seed}) once into {target}: about {minutes} min on 2 quiet cores with "
        f"{workers or 1} worker(s), longer beside other work; later runs load it"
    )
    started = time.perf_counter()
    training = _warm_start_all(config, seed, staging, workers, threads)
    warm_start_seconds = time.perf_counter() - started
    policies = {name: HFPolicy(path) for name, path in _model_paths(staging, config).items()}
    report_started = time.perf_counter()
    problems = evaluation_problems(config, seed)
    report = complementarity_report(
        policies,
        problems,
        n=config.eval_n,
        seed=seed,
        max_new_tokens=config.eval_max_new_tokens,
        groups=[mix_key(p, config) for p in problems],
    )
    report["level_weights"] = list(config.level_weights)
    add_skill_mix_summary(report, {spec.name: spec.skills for spec in config.models})
    (staging / REPORT_FILE).write_text(json.dumps(report, indent=2))
    log(format_report(report))
    build = {
        "key": key,
        "seed": seed,
        "config": dataclasses.asdict(config),
        "training": training,
        "threads": threads,
        "warm_start_seconds": warm_start_seconds,
        "report_seconds": time.perf_counter() - report_started,
        "weights_sha256": {
            name: weights_sha256(path) for name, path in _model_paths(staging, config).items()
        },
        "machine": kernel_provenance(),  # the same key builds other weights on other kernels
    }
    (staging / COMPLETE_FILE).write_text(json.dumps(build, indent=2))
    log(f"warm-start {warm_start_seconds:.0f}s, report {build['report_seconds']:.0f}s")
    if (target / COMPLETE_FILE).is_file():  # a concurrent build finished first: keep it
        shutil.rmtree(staging)
    else:
        shutil.rmtree(target, ignore_errors=True)  # an incomplete earlier attempt
        staging.rename(target)
    return _model_paths(target, config)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="cache directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pair", choices=list(PAIRS), default="tiny-pair")
    parser.add_argument("--workers", type=int, default=2, help="models trained in parallel")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per model")
    args = parser.parse_args(argv)
    paths = build_tiny_pair(
        args.out, args.seed, config=PAIRS[args.pair], workers=args.workers, threads=args.threads
    )
    for name, path in paths.items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
