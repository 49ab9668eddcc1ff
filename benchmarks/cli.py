"""The `graft` command line: one entry point, one subcommand per job.

Subcommands stay thin: each parses its options and calls a library function, so
everything the CLI does is also reachable from Python. A command's module is imported
only when that command runs (`graft --help` and `graft data` never load torch), and every
error a user can cause is one line, `graft <cmd>: error: <what, where, what is valid>`,
with exit status 2 (130 for Ctrl-C).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.config_files import find_config
from graft_env import threads

# name -> module with add_parser(commands); imported only when the command is the one given
COMMAND_MODULES = {
    "train": "benchmarks.commands.train",
    "eval": "benchmarks.commands.eval",
    "compare": "benchmarks.commands.compare",
    "library": "benchmarks.commands.library",
    "data": "benchmarks.commands.data",
    "env": "benchmarks.commands.env",
    "plot": "benchmarks.commands.plot",
}
# commands graft does not run -> what does that job instead (one line, exit status 2)
RETIRED_COMMANDS = {
    "plan": "the GPU memory plan is not part of graft; estimate a model's memory with "
    "`accelerate estimate-memory <model>` (docs/gpu.md)",
}
PROGRESS_BARS_VAR = "HF_HUB_DISABLE_PROGRESS_BARS"  # huggingface_hub's, read by transformers
# What an interrupted command leaves behind, and how to go on from there.
RESUME_HINTS = {
    "train": "rerun the same command to resume from the newest checkpoint in {run_dir}",
    "compare": "rerun the same command: finished cells are kept, the interrupted one resumes",
}


def _cmd_config_show(args: argparse.Namespace) -> int:
    from benchmarks.commands.config_show import filtered, render, shown_keys

    print(render(filtered(shown_keys(args.grid), args.section, args.strategy), args.format))
    return 0


def _cmd_config_validate(args: argparse.Namespace) -> int:
    if args.grid:
        from benchmarks.compare.grid import load_grid

        grid = load_grid(args.file, args.overrides)
        labels = ", ".join(entry.label for entry in grid.algorithms)
        print(f"{args.file}: valid grid {grid.name!r} ({labels}; seeds {list(grid.seeds)})")
        return 0
    from algorithms.training.run_config import load_config

    config = load_config(args.file, args.overrides)
    agents = ", ".join(agent.name for agent in config.agents)
    print(
        f"{args.file}: valid ({config.algorithm}, agents {agents}, {config.steps} steps, "
        f"run_dir {config.run_dir})"
    )
    return 0


def _version() -> str:
    """The installed graft-rlvr's version (a checkout on PYTHONPATH alone has none)."""
    try:
        return importlib.metadata.version("graft-rlvr")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed: a checkout on PYTHONPATH)"


def _summary(module: str) -> str:
    """A command's one-line help: its module docstring's first line after the colon
    ("`graft train`: run ..." -> "run ..."), read without importing the module."""
    package, _, name = module.partition(".")
    spec = importlib.util.find_spec(package)  # a top-level spec: its package is not imported
    folder = Path(next(iter(spec.submodule_search_locations or ()))) if spec else None
    source = (folder / f"{name.replace('.', '/')}.py").read_text() if folder else ""
    doc = ast.get_docstring(ast.parse(source)) or ""
    return doc.splitlines()[0].partition(": ")[2].rstrip(".") if doc else ""


def _add_config_parser(commands: argparse._SubParsersAction) -> None:
    config = commands.add_parser("config", help="print the config schema or check a config file")
    sub = config.add_subparsers(dest="config_command", required=True)
    show = sub.add_parser(
        "show", help="every run-config key with its type, default and help, by section"
    )
    show.add_argument("--grid", action="store_true", help="the grid-file schema (graft compare)")
    show.add_argument("--section", help="only this section's keys (env, agents, top-level, ...)")
    show.add_argument("--strategy", help="only the algorithm options this strategy declares")
    show.add_argument(
        "--format",
        default="text",
        help="text (grouped, wrapped to the terminal), lines (one per key, for grep), json",
    )
    show.set_defaults(func=_cmd_config_show)
    check = sub.add_parser(
        "validate", help="check a run config (or --grid file) without loading any model"
    )
    check.add_argument("file", type=find_config, help="a path, or a shipped config's name")
    check.add_argument("--grid", action="store_true", help="FILE is a graft compare grid")
    check.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    check.set_defaults(func=_cmd_config_validate)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; `command`'s module is imported for its options, the others only list
    their one-line help (None: all of them, as `graft --help` shows)."""
    parser = argparse.ArgumentParser(
        prog="graft", description="GRAFT: cross-model trajectory exchange for RLVR."
    )
    parser.add_argument("--version", action="version", version=f"graft {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    _add_config_parser(commands)

    for name, module in COMMAND_MODULES.items():
        if name != command:
            commands.add_parser(name, help=_summary(module))
            continue
        importlib.import_module(module).add_parser(commands)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in `argv` (the first word that is not an option)."""
    return next((word for word in argv if not word.startswith("-")), None)


def _error_line(command: str, error: BaseException) -> str:
    """A user-caused error as one line (an OSError names the path it could not use)."""
    if isinstance(error, OSError) and error.filename is not None:
        what = f"{error.strerror or error}: {error.filename}"
    else:
        what = " ".join(str(error).split()) or type(error).__name__
    return f"graft {command}: error: {what}"


def _interrupted(args: argparse.Namespace) -> str:
    hint = RESUME_HINTS.get(args.command)
    if hint is None:
        return f"graft {args.command}: interrupted"
    run_dir = "its run_dir"
    if args.command == "train":
        from algorithms.training.run_config import ConfigError, load_config

        try:
            run_dir = load_config(args.config, args.overrides).run_dir
        except ConfigError:  # interrupted before the config was read: nothing to resume
            return f"graft {args.command}: interrupted"
    return f"graft {args.command}: interrupted; {hint.format(run_dir=run_dir)}"


def _quiet_loading_bars() -> None:
    """No per-model "Loading weights" bars from transformers (two bars of `\r` updates per
    model on stderr, noise in a log file or before a one-line error), unless the user asks
    for them (HF_HUB_DISABLE_PROGRESS_BARS=0)."""
    os.environ.setdefault(PROGRESS_BARS_VAR, "1")
    if os.environ[PROGRESS_BARS_VAR] == "1" and "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()  # read at its import


def main(argv: Sequence[str] | None = None) -> int:
    # Before any subcommand imports torch, whose OpenMP runtime reads these once.
    threads.process_defaults()
    _quiet_loading_bars()
    argv = sys.argv[1:] if argv is None else list(argv)
    retired = RETIRED_COMMANDS.get(_command_of(argv) or "")
    if retired is not None:
        print(f"graft {_command_of(argv)}: error: {retired}", file=sys.stderr)
        return 2
    args = build_parser(_command_of(argv)).parse_args(argv)
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so a closed pipe is handled below and not at exit
        return status
    except KeyboardInterrupt:
        print(_interrupted(args), file=sys.stderr)
        return 130
    except BrokenPipeError:  # `graft config show | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 0
    except (ValueError, OSError, KeyError) as error:
        print(_error_line(args.command, error), file=sys.stderr)
        return 2
    except Exception as error:
        from safetensors import SafetensorError  # a full disk while a checkpoint is saved

        if not isinstance(error, SafetensorError):
            raise
        print(_error_line(args.command, error), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
