"""`graft eval`: evaluate one model on the benchmarks (GRAFT-SPEC §10) and write its reports.

Writes results.json (everything but the samples), results.csv (one row per benchmark and
an average row), results.md (the table) and samples.jsonl (every sample) into --out.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the harness imports torch: only `run` needs it, not `graft eval --help`
    from benchmarks.evaluate import EvalResult

OUTPUT_FILES = ("results.json", "results.csv", "results.md", "samples.jsonl")


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "eval",
        help="evaluate a model on the math benchmarks (avg@k pass@1)",
        description="Sample k responses per problem, verify them and report pass@1 "
        "(mean over samples, then problems) per benchmark and their unweighted average, "
        "as mean ± std over --repeats runs with seeds seed, seed+1, ...",
    )
    parser.add_argument(
        "--model", required=True, help="tiny-a, tiny-b, or a local HF model/checkpoint dir"
    )
    parser.add_argument(
        "--datasets",
        default=None,
        help="comma-separated dataset names (default: the paper's five, "
        "benchmarks.evaluate.PAPER_BENCHMARKS)",
    )
    parser.add_argument("--k", type=at_least(1), default=8, help="samples per problem (default: 8)")
    parser.add_argument("--temperature", type=float, default=0.6, help="default: 0.6")
    parser.add_argument("--top-p", type=float, default=0.95, help="default: 0.95")
    parser.add_argument("--max-new-tokens", type=at_least(1), default=4096, help="default: 4096")
    parser.add_argument("--repeats", type=at_least(1), default=1, help="whole-protocol repeats")
    parser.add_argument(
        "--limit", type=at_least(1), default=None, help="first N problems of each set"
    )
    parser.add_argument("--seed", type=at_least(0), default=0, help="seed of the first repeat")
    parser.add_argument("--data-dir", default=None, help="default: $GRAFT_DATA_DIR")
    parser.add_argument("--out", default=None, help="default: runs/eval/<model name>")
    parser.add_argument(
        "--batch-size",
        type=at_least(1),
        default=32,
        help="problems per generate call (default: 32)",
    )
    parser.add_argument(
        "--option",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="policy option (HFPolicyOptions field), value parsed as YAML, "
        "e.g. --option device=cuda --option dtype=bfloat16",
    )
    parser.set_defaults(func=run)


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= `minimum` (argparse names the option)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
        return value

    return parse


def parse_datasets(text: str) -> list[str]:
    """Comma-separated names; an empty name (",," or a trailing comma) or a repeated one
    is an error."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise ValueError(f"--datasets has an empty name in {text!r}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"--datasets names {repeated} more than once")
    return names


def default_out_dir(model: str) -> Path:
    """runs/eval/<last path component of the model>, with odd characters replaced by '_'."""
    name = Path(str(model).rstrip("/\\")).name or "model"
    return Path("runs") / "eval" / re.sub(r"[^A-Za-z0-9._-]", "_", name)


def write_outputs(result: EvalResult, out_dir: Path) -> list[Path]:
    """The four report files of OUTPUT_FILES, in that order."""
    from benchmarks.report import write_samples_jsonl

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / name for name in OUTPUT_FILES]
    result.to_json(paths[0])
    result.to_csv(paths[1])
    paths[2].write_text(result.to_markdown())
    write_samples_jsonl(result.samples, paths[3])
    return paths


def run(args: argparse.Namespace) -> int:
    from algorithms.run_config import apply_override, check_policy_options
    from benchmarks.evaluate import PAPER_BENCHMARKS, evaluate
    from graft_env.data import load
    from graft_env.policies import load_policy

    datasets = list(PAPER_BENCHMARKS) if args.datasets is None else parse_datasets(args.datasets)
    options: dict[str, object] = {}
    for assignment in args.options:
        apply_override(options, assignment)
    check_policy_options(options, "--option")
    # every set read before the model loads: a typo or a missing file fails in a second
    sets = {name: load(name, data_dir=args.data_dir) for name in datasets}
    out_dir = Path(args.out) if args.out else default_out_dir(args.model)
    out_dir.mkdir(parents=True, exist_ok=True)  # fail before hours of sampling, not after
    try:
        policy = load_policy(args.model, **options)
    except TypeError as error:  # options that do not fit together (vllm_* without vllm)
        raise ValueError(f"--option: {error}") from error
    result = evaluate(
        policy,
        sets,
        k=args.k,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        repeats=args.repeats,
        limit=args.limit,
        seed=args.seed,
        data_dir=args.data_dir,
        batch_size=args.batch_size,
        progress=True,
    )
    result = replace(result, config={**result.config, "model": args.model, "options": options})
    paths = write_outputs(result, out_dir)
    print(result.to_markdown())
    print("written: " + ", ".join(str(path) for path in paths))
    return 0
