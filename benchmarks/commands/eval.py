"""`graft eval`: evaluate one model on the benchmarks (the paper's protocol) and write its reports.

Writes results.json (everything but the samples), results.csv (one row per benchmark and
an average row), results.md (the table) and samples.jsonl (every sample) into --out. The
first three are rewritten after every batch (`"complete": false` until the end), so a run
that is killed keeps what finished; one that stops on Ctrl-C or an error writes the samples
verified so far too, and says which problems of which repeat only the samples hold (the
table has the problems finished in every repeat).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from algorithms.training import eval_settings
from benchmarks.commands.data import DATA_DIR_HELP, add_source_option
from graft_env.eval.protocol import PROTOCOL

if TYPE_CHECKING:  # the harness imports torch: only `run` needs it, not `graft eval --help`
    from graft_env.eval.evaluate import EvalResult

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
        help="comma-separated dataset names, or procedural/<skill> for that skill's held-out "
        "test set (default: the paper's five, graft_env.eval.evaluate.PAPER_BENCHMARKS)",
    )
    parser.add_argument(
        "--procedural",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option of the procedural/<skill> sets (difficulty, seed; size is --limit, "
        "default 100), value parsed as YAML, e.g. --procedural difficulty=1: the tiny "
        "pair's level",
    )
    for name, kind in (("k", at_least(1)), ("temperature", float), ("top_p", float)):
        option(parser, name, kind)
    option(parser, "max_new_tokens", at_least(1), "; a prompt that leaves none is skipped, counted")
    parser.add_argument(
        "--repeats",
        type=at_least(1),
        default=PROTOCOL.repeats,
        help=f"whole-protocol repeats (default: {PROTOCOL.repeats})",
    )
    parser.add_argument(
        "--limit", type=at_least(1), default=None, help="first N problems per set (default: all)"
    )
    option(parser, "seed", at_least(0), " of the first repeat")
    parser.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    add_source_option(parser)
    parser.add_argument("--out", default=None, help="default: runs/eval/<model name>")
    parser.add_argument(
        "--batch-size",
        type=at_least(1),
        default=PROTOCOL.batch_size,
        help=f"problems per generate call (default: {PROTOCOL.batch_size})",
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


def option(
    parser: argparse.ArgumentParser, name: str, kind: Callable[[str], Any], more: str = ""
) -> None:
    """`--name` with the default and help of `EvalSettings` field `name` (the protocol's,
    shared with run configs' and grids' `eval:` sections)."""
    value = eval_settings.default(name)
    parser.add_argument(
        f"--{name.replace('_', '-')}",
        type=kind,
        default=value,
        help=f"{eval_settings.help_of(name)}{more} (default: {value})",
    )


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


def write_reports(result: EvalResult, out_dir: Path) -> list[Path]:
    """results.json, results.csv and results.md (the table and `notes`), in that order."""
    from graft_env.eval.report import write_csv, write_json

    paths = [out_dir / name for name in OUTPUT_FILES[:3]]
    write_json(result, paths[0])
    write_csv(result, paths[1])
    paths[2].write_text(markdown(result))
    return paths


def write_outputs(result: EvalResult, out_dir: Path) -> list[Path]:
    """The four report files of OUTPUT_FILES, in that order."""
    from graft_env.eval.report import write_samples_jsonl

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = write_reports(result, out_dir)
    paths.append(out_dir / OUTPUT_FILES[3])
    write_samples_jsonl(result.samples, paths[3])
    return paths


def notes(result: EvalResult) -> list[str]:
    """What the table does not say: prompts skipped for the model's context, a partial run."""
    lines = []
    skipped = {name: len(b.skipped) for name, b in result.benchmarks.items() if b.skipped}
    if skipped:
        counts = ", ".join(f"{name} {count}" for name, count in skipped.items())
        lines.append(
            f"Skipped prompts (no room for a response in the model's "
            f"{result.config['max_positions']} positions; not in n problems or pass@1): "
            f"{counts}."
        )
    if not result.config["complete"]:
        only = samples_only(result)
        lines.append(
            "Partial: the evaluation stopped before its end; the table holds the problems "
            "finished in every repeat"
            + (f"; only in samples.jsonl: {', '.join(only)}." if only else ".")
        )
    return lines


def samples_only(result: EvalResult) -> list[str]:
    """Per benchmark and repeat, the verified problems a partial table leaves out (it holds
    the problems finished in every repeat), e.g. "aime24 repeat 1/2: 3 problems"."""
    tabled = {name: set(bench.problem_ids) for name, bench in result.benchmarks.items()}
    left_out: dict[tuple[str, int], set[str]] = {}
    for sample in result.samples:
        if sample.problem_id not in tabled.get(sample.benchmark, ()):
            left_out.setdefault((sample.benchmark, sample.repeat), set()).add(sample.problem_id)
    repeats = result.config["repeats"]
    return [
        f"{name} repeat {repeat + 1}/{repeats}: {len(ids)} problem{'s' * (len(ids) != 1)}"
        for (name, repeat), ids in left_out.items()
    ]


def markdown(result: EvalResult) -> str:
    """The report's table and settings, then its `notes`."""
    from graft_env.eval.report import render_markdown

    return render_markdown(result) + "".join(f"{line}\n" for line in notes(result))


def procedural_options(assignments: list[str], datasets: list[str]) -> dict[str, object]:
    """--procedural KEY=VALUE options; an error when no procedural/<skill> set is named."""
    from algorithms.training.run_config import apply_override

    options: dict[str, object] = {}
    for assignment in assignments:
        apply_override(options, assignment)
    if options and not any(name.startswith("procedural/") for name in datasets):
        raise ValueError("--procedural is set but --datasets names no procedural/<skill> set")
    return options


def run(args: argparse.Namespace) -> int:
    from algorithms.training.periodic_eval import eval_sets
    from algorithms.training.run_config import apply_override, check_policy_options
    from graft_env.eval.evaluate import PAPER_BENCHMARKS, evaluate
    from graft_env.policies import load_policy

    datasets = list(PAPER_BENCHMARKS) if args.datasets is None else parse_datasets(args.datasets)
    options: dict[str, object] = {}
    for assignment in args.options:
        apply_override(options, assignment)
    check_policy_options(options, "--option")
    # every set read before the model loads: a typo or a missing file fails in a second
    procedural = procedural_options(args.procedural, datasets)
    sets = eval_sets(datasets, args.data_dir, args.limit, procedural, source=args.source)
    out_dir = Path(args.out) if args.out else default_out_dir(args.model)
    out_dir.mkdir(parents=True, exist_ok=True)  # fail before hours of sampling, not after
    for name in OUTPUT_FILES:  # an earlier run's files must not pass for this one's
        (out_dir / name).unlink(missing_ok=True)
    try:
        policy = load_policy(args.model, **options)
    except TypeError as error:  # options that do not fit together (vllm_* without vllm)
        raise ValueError(f"--option: {error}") from error

    def described(result: EvalResult) -> EvalResult:
        described = {"model": args.model, "options": options, "source": args.source}
        return replace(result, config={**result.config, **described})

    latest: EvalResult | None = None  # the result after the newest batch

    def on_batch(result: EvalResult) -> None:
        nonlocal latest
        latest = described(result)
        if latest.benchmarks:  # a kill keeps the summary of what finished
            write_reports(latest, out_dir)

    try:
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
            on_batch=on_batch,
        )
    except BaseException:  # Ctrl-C or an error: keep what finished, then report the stop
        if latest is not None:
            print(f"graft eval: {_keep(latest, out_dir)}", file=sys.stderr)
        raise
    paths = write_outputs(described(result), out_dir)
    print(markdown(result))
    print("written: " + ", ".join(str(path) for path in paths))
    return 0


def _keep(partial: EvalResult, out_dir: Path) -> str:
    """Write a stopped run's partial result (or only its samples); say where it is."""
    from graft_env.eval.report import write_samples_jsonl

    samples = f"the {len(partial.samples)} samples verified so far"
    if partial.benchmarks:
        paths = write_outputs(partial, out_dir)
        finished = sum(len(b.problem_ids) for b in partial.benchmarks.values())
        kept = (
            f"kept the {finished} problems finished in every repeat in {paths[0]} and "
            f"{samples} in {paths[3]}"
        )
    else:
        path = out_dir / OUTPUT_FILES[3]
        write_samples_jsonl(partial.samples, path)
        kept = f"no problem finished every repeat; kept {samples} in {path}"
    only = samples_only(partial)
    if only:
        kept += f"; only in the samples (not finished in every repeat): {', '.join(only)}"
    return kept
