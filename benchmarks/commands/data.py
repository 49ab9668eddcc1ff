"""`graft data`: list, inspect and download the datasets.

`graft data fetch` writes the Hugging Face Hub copies of the real benchmarks into a data
directory in the reference layout (`graft_env.data.fetch`: row counts checked against the
reference files, problems compared with theirs), so every later command reads local files.
`--source` picks where `graft data show` reads a benchmark: `files` (the data directory),
`hub`, or `auto` (the file when the data directory has it, else the Hub).
"""

from __future__ import annotations

import argparse

DATA_DIR_HELP = (
    "default: $GRAFT_DATA_DIR, else the checkout's data, else what graft data fetch wrote"
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    data = commands.add_parser("data", help="list, inspect and download the datasets")
    sub = data.add_subparsers(dest="data_command", required=True)
    sub.add_parser("list", help="registered dataset names").set_defaults(func=run_list)
    show = sub.add_parser("show", help="load a dataset and print a few problems")
    show.add_argument("name")
    show.add_argument("--split", default=None)
    show.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    add_source_option(show)
    show.add_argument("--limit", type=int, default=3)
    show.set_defaults(func=run_show)
    fetch = sub.add_parser(
        "fetch",
        help="download the benchmarks from the Hugging Face Hub into a data directory",
        description="Write the Hub copy of each named benchmark (default: all) in the "
        "reference layout, checking its row count against the reference file's and saying "
        "whether its problems and answers equal the reference's. Needs the `datasets` "
        "package: pip install datasets.",
    )
    fetch.add_argument("names", nargs="*", metavar="NAME", help="benchmark names (default: all)")
    fetch.add_argument(
        "--data-dir",
        default=None,
        help="where to write (default: $GRAFT_DATA_DIR, else the graft cache's data/, "
        "which every command searches)",
    )
    fetch.add_argument("--force", action="store_true", help="download files that are there too")
    fetch.set_defaults(func=run_fetch)


def add_source_option(parser: argparse.ArgumentParser) -> None:
    """`--source` of the commands that read benchmarks, as a run config's `eval.source`."""
    from algorithms.training import eval_settings
    from graft_env.data.benchmarks import SOURCES

    value = eval_settings.default("source")
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default=value,
        help=f"{eval_settings.help_of('source')} (default: {value})",
    )


def run_list(args: argparse.Namespace) -> int:
    from graft_env import data

    for name in data.available():
        print(name)
    return 0


def run_show(args: argparse.Namespace) -> int:
    from graft_env import data
    from graft_env.data.registry import dataset_options

    options: dict[str, object] = {"size": args.limit} if args.name == "procedural" else {}
    takes_source = args.name in data.available() and "source" in (dataset_options(args.name) or ())
    if takes_source or args.source != "auto":  # a named source no dataset reads is an error
        options["source"] = args.source
    problems = data.load(args.name, split=args.split, data_dir=args.data_dir, **options)
    print(f"{args.name}: {len(problems)} problems")
    for problem in problems[: args.limit]:
        print(f"\n[{problem.id}] gold: {problem.answer}\n{problem.problem}")
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    from graft_env.data.fetch import fetch

    done = fetch(args.names, args.data_dir, force=args.force, report=_say)
    differ = [f"{item.name} {item.split}" for item in done if item.matches is False]
    if differ:
        print(f"differ from the reference files: {', '.join(differ)}")
    return 0


def _say(line: str) -> None:
    print(line, flush=True)
