"""`graft train`: run (or resume) a training run from a YAML config."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from algorithms.training.run_config import load_config
from graft_env.threads import resolve_threads, torch_threads

# the study in miniature (issue 16): the testbed pair, built on first use
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "testbed_pair_graft.yaml"


def add_parser(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser(
        "train",
        help="train policies with an algorithm from the registry",
        description="Train N policies side by side; resumes from the run directory's newest "
        "intact checkpoint unless --fresh is given.",
    )
    train.add_argument(
        "--config", default=str(DEFAULT_CONFIG), help=f"YAML run config (default: {DEFAULT_CONFIG})"
    )
    train.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set steps=5 --set algorithm=grpo",
    )
    train.add_argument(
        "--fresh",
        action="store_true",
        help="delete the run directory first (only one a graft run created, and only once "
        "the whole config is valid)",
    )
    train.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = load_config(args.config, args.overrides)
    # only now torch (the loop, checkpoints): a refused config is refused in a second
    from algorithms.training.loop import Trainer
    from algorithms.training.run_dir import check_fresh, remove_fresh
    from algorithms.training.run_summary import run_summary

    threads = resolve_threads(config.threads)
    if args.fresh:
        check_fresh(Path(config.run_dir))  # a refusal comes before any model loads
    with torch_threads(threads):  # before the models load: they are the first to compute
        trainer = Trainer(config)  # the last checks of the config: policies, data, algorithm
        if args.fresh:
            remove_fresh(Path(config.run_dir))
        rows = trainer.train()
    print("\n" + "\n".join(run_summary(config, rows, threads, trainer.checkpoint)))
    return 0
