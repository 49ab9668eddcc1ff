"""The `graft` command line: one entry point, one subcommand per job.

Subcommands stay thin: each parses its options and calls a library function, so
everything the CLI does is also reachable from Python.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from graft_env import data, threads


def _cmd_data_list(args: argparse.Namespace) -> int:
    for name in data.available():
        print(name)
    return 0


def _cmd_data_show(args: argparse.Namespace) -> int:
    options = {"size": args.limit} if args.name == "procedural" else {}
    problems = data.load(args.name, split=args.split, data_dir=args.data_dir, **options)
    print(f"{args.name}: {len(problems)} problems")
    for problem in problems[: args.limit]:
        print(f"\n[{problem.id}] gold: {problem.answer}\n{problem.problem}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graft", description="GRAFT: cross-model trajectory exchange for RLVR."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    data_cmd = commands.add_parser("data", help="list and inspect datasets")
    data_sub = data_cmd.add_subparsers(dest="data_command", required=True)
    data_sub.add_parser("list", help="registered dataset names").set_defaults(func=_cmd_data_list)
    show = data_sub.add_parser("show", help="load a dataset and print a few problems")
    show.add_argument("name")
    show.add_argument("--split", default=None)
    show.add_argument("--data-dir", default=None, help="default: $GRAFT_DATA_DIR")
    show.add_argument("--limit", type=int, default=3)
    show.set_defaults(func=_cmd_data_show)

    from algorithms import train_command
    from benchmarks import compare_command, eval_command

    train_command.add_parser(commands)
    eval_command.add_parser(commands)
    compare_command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Before build_parser: the subcommands import torch, whose OpenMP runtime reads these once.
    threads.process_defaults()
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, KeyError) as error:
        print(f"graft {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
