"""`graft train`: run (or resume) a training run from a YAML config."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from algorithms.training.run_config import RESTART_FLAG, load_config
from benchmarks.config_files import default_config, find_config
from graft_env.threads import resolve_threads, torch_threads

DEFAULT_CONFIG = default_config()  # the study in miniature: the testbed pair, built on first use


def add_parser(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser(
        "train",
        help="train policies with an algorithm from the registry",
        description="Train N policies side by side; resumes from the run directory's newest "
        "intact checkpoint unless --fresh or --restart is given.",
        epilog="Every run-config key can be set with --set KEY=VALUE. `graft config show` lists "
        "them with their types, defaults and help; `--section env` or `--strategy graft` shows "
        "one part.",
    )
    train.add_argument(
        "--config",
        type=find_config,
        default=str(DEFAULT_CONFIG),
        help="YAML run config: a path, or a shipped config's name (configs/X.yaml, X) "
        f"(default: {DEFAULT_CONFIG.name}, the testbed pair's GRAFT run)",
    )
    train.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set steps=5 --set algorithm=grpo",
    )
    start = train.add_mutually_exclusive_group()
    start.add_argument(
        "--fresh",
        action="store_true",
        help="delete the run directory first (only one a graft run created, and only once "
        "the whole config is valid)",
    )
    start.add_argument(
        RESTART_FLAG,
        action="store_true",
        help="start over from step 0, the run directory's files moved to its "
        "earlier-<UTC time>/ (when no checkpoint is usable, or its settings changed)",
    )
    train.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = load_config(args.config, args.overrides)
    # only now torch (the loop, checkpoints): a refused config is refused in a second
    from algorithms.training.loop import Trainer
    from algorithms.training.run_dir import append_note
    from algorithms.training.run_summary import run_summary

    threads = resolve_threads(config.threads)
    start = "fresh" if args.fresh else "restart" if args.restart else "resume"
    with torch_threads(threads):  # before the models load: they are the first to compute
        # the run directory is checked first, then the models load and the last checks run
        trainer = Trainer(config, start=start)
        rows = trainer.train()
    summary = "\n".join(run_summary(config, rows, threads, trainer.checkpoint))
    print("\n" + summary)
    append_note(Path(config.run_dir), "summary\n" + summary)
    return 0
