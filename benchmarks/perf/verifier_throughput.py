"""Verifier throughput: items/s of the reward on real MATH500 answers.

RL verifies every response of every step (paper: 128 prompts x 8 responses per model), so
the reward must keep up with generation. This measures the same items three ways: the
in-process ``verify_one`` loop (single-process baseline), and ``VerifierPool`` with 1 and
2 workers (pool start-up excluded: workers start once per run). Items alternate a correct
response (the problem's own gold, boxed) and a wrong one (the next problem's gold, boxed),
so both the matching and the non-matching path are timed.

    python -m benchmarks.perf.verifier_throughput [--items N] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.perf.common import REPO
from graft_env.data import load
from graft_env.rewards import Verdict, VerifierPool, status_counts, verify_one
from graft_env.rewards.checker import warm_up

DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"
POOL_SIZES = (1, 2)


def build_items(golds: Sequence[str], num_items: int) -> tuple[list[str], list[str]]:
    """``num_items`` (response, gold) pairs cycling over ``golds``; every other one wrong."""
    if len(golds) < 2:
        raise ValueError(f"need at least 2 gold answers to build wrong responses, got {len(golds)}")
    responses, item_golds = [], []
    for item in range(num_items):
        index = item % len(golds)
        answer = golds[index] if item % 2 == 0 else golds[(index + 1) % len(golds)]
        responses.append(
            f"Working through the problem step by step, the answer is \\boxed{{{answer}}}."
        )
        item_golds.append(golds[index])
    return responses, item_golds


def _timed(run: Callable[[], list[Verdict]]) -> tuple[list[Verdict], float]:
    start = time.perf_counter()
    verdicts = run()
    return verdicts, time.perf_counter() - start


def measure(responses: list[str], golds: list[str]) -> list[tuple[str, list[Verdict], float]]:
    """(mode, verdicts, seconds) for the single-process loop and each pool size.

    Every mode starts with cold answer caches and warm imports: pool workers inherit a
    warmed-up math-verify from the fork server, so this process warms up too first.
    """
    warm_up()
    results = []
    verdicts, seconds = _timed(
        lambda: [verify_one(r, g) for r, g in zip(responses, golds, strict=True)]
    )
    results.append(("single process (verify_one)", verdicts, seconds))
    for num_workers in POOL_SIZES:
        with VerifierPool(num_workers=num_workers) as pool:
            verdicts, seconds = _timed(lambda pool=pool: pool.verify_batch(responses, golds))
        results.append(
            (f"VerifierPool({num_workers} worker{'s' * (num_workers > 1)})", verdicts, seconds)
        )
    return results


def print_table(results: list[tuple[str, list[Verdict], float]]) -> None:
    baseline_verdicts, baseline_seconds = results[0][1], results[0][2]
    header = (
        f"{'mode':<30} {'items':>6} {'seconds':>8} {'items/s':>8} {'speedup':>8} "
        f"{'correct':>8}  statuses"
    )
    print(header)
    print("-" * len(header))
    for mode, verdicts, seconds in results:
        counts = {status: n for status, n in status_counts(verdicts).items() if n}
        correct = sum(verdict.reward for verdict in verdicts)
        print(
            f"{mode:<30} {len(verdicts):>6} {seconds:>8.2f} {len(verdicts) / seconds:>8.1f} "
            f"{baseline_seconds / seconds:>7.2f}x {correct:>8.0f}  {counts}"
        )
    for mode, verdicts, _ in results[1:]:
        disagreements = sum(a != b for a, b in zip(verdicts, baseline_verdicts, strict=True))
        if disagreements:
            print(
                f"note: {mode} disagrees with the single-process verdict on {disagreements} items"
            )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=500, help="items per mode (default 500)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("GRAFT_DATA_DIR") or DEFAULT_DATA_DIR),
        help="benchmark data directory (default: $GRAFT_DATA_DIR, else ../shared/data)",
    )
    args = parser.parse_args(argv)
    if args.items < 1:
        parser.error(f"--items must be >= 1, got {args.items}")
    golds = [problem.answer for problem in load("math500", data_dir=args.data_dir)]
    responses, item_golds = build_items(golds, args.items)
    print(
        f"{args.items} items from {len(golds)} MATH500 answers, half correct, half wrong; "
        f"{os.cpu_count()} CPUs"
    )
    print_table(measure(responses, item_golds))


if __name__ == "__main__":
    main()
