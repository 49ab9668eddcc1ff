"""`graft library`: build, import into and inspect trajectory libraries (graft-library's peers)."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence

from algorithms.library.format import LibraryGroup
from algorithms.library.importers import READERS
from graft_env.types import FINISH_REASONS


def add_parser(commands: argparse._SubParsersAction) -> None:
    library = commands.add_parser(
        "library",
        help="build, import into and inspect trajectory libraries (graft-library's peers)",
        description="A trajectory library holds stored groups of any runs and imported "
        "rollouts, keyed by problem text; a graft-library run looks up its all-fail prompts "
        "in it (run config `library: {path: LIB}`).",
    )
    sub = library.add_subparsers(dest="library_command", required=True)

    build = sub.add_parser("build", help="a library from the trajectory stores of runs")
    build.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    _add_output(build)
    build.add_argument("--data-dir", default=None, help="benchmark files of the runs' datasets")
    build.set_defaults(func=_build)

    show = sub.add_parser("show", help="groups, responses and prompts per source")
    show.add_argument("library", metavar="LIB")
    show.add_argument("--prompts", action="store_true", help="also one line per prompt")
    show.set_defaults(func=_show)

    imp = sub.add_parser(
        "import",
        help="rollouts from a JSONL/Parquet file (vLLM dumps, verl/TRL logs), re-verified",
        description="One row per response; rows are matched to --dataset by problem text, "
        "re-verified against its gold answers, and grouped by prompt (and step, group).",
    )
    imp.add_argument("file", metavar="FILE")
    imp.add_argument("--format", choices=tuple(READERS), default="jsonl")
    imp.add_argument("--model", required=True, help="the source model's id")
    imp.add_argument("--tokenizer", default=None, help="its tokenizer's id (default: --model)")
    imp.add_argument("--dataset", required=True, help="the dataset the library is for")
    imp.add_argument("--split", default=None)
    imp.add_argument("--data-dir", default=None)
    imp.add_argument(
        "--dataset-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a loader option (YAML value), e.g. size=40",
    )
    imp.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="ROLE=COLUMN",
        help="the file's column for a role (prompt, response, logprobs, token_ids, "
        "finish_reason, reward, prompt_id, step, time, group); default: the role's name",
    )
    imp.add_argument(
        "--finish-reason",
        choices=FINISH_REASONS,
        default=None,
        help="every row's finish reason, when the file has none",
    )
    imp.add_argument(
        "--score-with",
        default=None,
        metavar="MODEL",
        help="score responses without log-probs with the source model, the same as --model "
        "(otherwise they are marked, and graft-library refuses them)",
    )
    _add_output(imp)
    imp.set_defaults(func=_import)


def _add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="LIB", help="the library to write")
    parser.add_argument(
        "--append", action="store_true", help="add a part to the existing library LIB"
    )


def _pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def summary_lines(groups: Sequence[LibraryGroup], per_prompt: bool = False) -> list[str]:
    """Counts per source (groups and their sizes, responses, prompts, steps, unscored
    responses) and per prompt (groups, sources, success counts k)."""
    sources: dict[tuple[str, str], list[LibraryGroup]] = {}
    prompts: dict[str, list[LibraryGroup]] = {}
    for group in groups:
        sources.setdefault((group.source, group.model_id), []).append(group)
        prompts.setdefault(group.key, []).append(group)
    responses = sum(group.n for group in groups)
    lines = [f"{len(groups)} groups, {responses} responses, {len(prompts)} prompts"]
    for (source, model), members in sorted(sources.items()):
        steps = sorted({g.step for g in members if g.step is not None})
        unscored = sum(g.logprob_origins.count("missing") for g in members)
        sizes = Counter(g.n for g in members)  # a run uses the groups of its own n only
        shown = ", ".join(f"n={n}: {sizes[n]}" for n in sorted(sizes))
        lines.append(
            f"  {source} [{model}]: {len(members)} groups ({shown}), "
            f"{sum(g.n for g in members)} responses, {len({g.key for g in members})} prompts"
            + (f", steps {steps[0]}-{steps[-1]}" if steps else "")
            + (f", {unscored} responses without log-probs" if unscored else "")
        )
    per = Counter(len(members) for members in prompts.values())
    lines.append("groups per prompt: " + ", ".join(f"{k}: {per[k]} prompts" for k in sorted(per)))
    if per_prompt:
        for members in sorted(prompts.values(), key=lambda m: m[0].problem):
            first = members[0]
            lines.append(
                f"  {first.key[:12]} {first.prompt_id or '-'}: {len(members)} groups from "
                f"{len({g.source for g in members})} sources, k {sorted(g.k for g in members)}"
            )
    return lines


def _build(args: argparse.Namespace) -> int:
    from algorithms.library import build_library, read_library

    part = build_library(args.run_dirs, args.out, data_dir=args.data_dir, append=args.append)
    print(f"wrote {part}")
    print("\n".join(summary_lines(read_library(args.out))))
    return 0


def _show(args: argparse.Namespace) -> int:
    from algorithms.library import read_library

    print(f"{args.library}: " + "\n".join(summary_lines(read_library(args.library), args.prompts)))
    return 0


def _import(args: argparse.Namespace) -> int:
    import yaml

    from algorithms.library import ImportSpec, import_rollouts, read_library

    options = {
        key: yaml.safe_load(value)
        for key, value in _pairs(args.dataset_option, "--dataset-option").items()
    }
    spec = ImportSpec(
        path=args.file,
        model=args.model,
        dataset=args.dataset,
        format=args.format,
        tokenizer=args.tokenizer,
        split=args.split,
        data_dir=args.data_dir,
        dataset_options=options,
        columns=_pairs(args.column, "--column"),
        finish_reason=args.finish_reason,
        score_with=args.score_with,
    )
    result = import_rollouts(spec, args.out, append=args.append)
    print(
        f"wrote {result.part}: {result.groups} groups, {result.responses} responses "
        f"(re-verified: {result.reward_changed} rewards differ from the file's); skipped "
        f"{result.skipped_rows} rows whose problem is not in {args.dataset}"
    )
    if result.rescored:
        print(f"{result.rescored} responses had no log-probs: scored with {args.score_with}")
    if result.missing_logprobs:
        print(
            f"{result.missing_logprobs} responses have no generation log-probs: marked "
            "'missing', and graft-library refuses them (its compatibility score needs them); "
            "import again with --score-with MODEL"
        )
    print("\n".join(summary_lines(read_library(args.out))))
    return 0
