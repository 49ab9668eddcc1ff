"""Is the default thread setting safe? One short `graft train` per thread setting, alone and
beside a busy process (issue #15 item 1).

Each run is a fresh `python -m benchmarks.cli train` process (the built-in tiny-pair config,
made short with `--set`), started with neither ``OMP_NUM_THREADS`` nor ``OMP_WAIT_POLICY``
in its environment, so it runs exactly as a user's `graft train` does. A setting is a
`threads` value (`--set threads=N`) or `default` (none: what a user gets). Conditions:
`alone`, and `beside` a competing process that spins a 256 x 256 torch matmul loop on
`--competitor-threads` threads with OpenMP's own (spinning) wait policy, as another user's
job would. Within a round every condition runs every setting once, the order rotated from
round to round, so drift of a shared machine hits all settings alike.

Per condition and setting: the median seconds of the training steps (the loop's own phase
times, summed over steps; wall seconds of the whole process beside them), the ratio to the
condition's best setting, and the range of per-round ratios (a run against the best
setting's run of the same round). `identical` says whether every run of the setting, in
both conditions, ended with the same metrics (all but the time columns). The target: the
default within 1.2x of the best setting in both conditions.

    python -m benchmarks.perf.threads [--rounds 3] [--settings 1 2 default] [--steps 4]
        [--batch-size 8 --n 4 --max-new-tokens 64] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.perf.common import REPO
from graft_env.threads import THREADS_VAR, WAIT_POLICY_VAR

# the tiny pair: quick to build, and what the README's thread figures were measured on
DEFAULT_CONFIG = REPO / "configs" / "tiny_pair_graft.yaml"

DEFAULT_SETTING = "default"
CONDITIONS = ("alone", "beside")
COMPETITOR = """
import sys, torch
torch.set_num_threads(int(sys.argv[1]))
x = torch.randn(256, 256)
print("spinning", flush=True)
while True:
    x = torch.tanh(x @ x)
"""


@dataclass(frozen=True)
class Run:
    """One `graft train` process: its condition, setting, round and what it measured."""

    condition: str
    setting: str
    round: int
    step_seconds: float  # the loop's phase times, summed over every step
    wall_seconds: float  # the whole process: start-up, model loading, steps, checkpoint
    metrics: tuple[str, ...]  # every metrics row without its time columns, as JSON


def user_env() -> dict[str, str]:
    """This process's environment without the OpenMP settings: a user who set none."""
    env = {k: v for k, v in os.environ.items() if k not in (THREADS_VAR, WAIT_POLICY_VAR)}
    return {**env, "TRANSFORMERS_VERBOSITY": "error"}


@contextlib.contextmanager
def competitor(threads: int) -> Iterator[None]:
    """A process spinning a matmul loop on `threads` threads while the body runs."""
    env = {**user_env(), THREADS_VAR: str(threads)}
    command = [sys.executable, "-c", COMPETITOR, str(threads)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        if process.stdout is None or process.stdout.readline().strip() != "spinning":
            raise RuntimeError(f"the competing process did not start (exit {process.poll()})")
        yield
    finally:
        process.kill()
        process.wait()


def train_command(setting: str, run_dir: Path, args: argparse.Namespace) -> list[str]:
    """The `graft train` command line of one run."""
    overrides = [
        f"steps={args.steps}",
        f"env.batch_size={args.batch_size}",
        f"algorithm_options.n={args.n}",
        f"sampling.max_new_tokens={args.max_new_tokens}",
        f"run_dir={run_dir}",
        f"checkpoint_every={args.steps}",
        "progress=false",
        "tensorboard=false",
    ]
    if setting != DEFAULT_SETTING:
        overrides.append(f"threads={setting}")
    command = [sys.executable, "-m", "benchmarks.cli", "train", "--config", str(args.config)]
    return [*command, *(word for override in overrides for word in ("--set", override))]


def read_metrics(run_dir: Path) -> tuple[float, tuple[str, ...]]:
    """(seconds of every step, the metrics rows without time columns) of a finished run."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = {row["step"]: row for row in rows}  # the phase times are the step's, in every row
    seconds = sum(v for row in steps.values() for k, v in row.items() if k.startswith("time/"))
    kept = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]
    return seconds, tuple(json.dumps(row, sort_keys=True) for row in kept)


def run_once(
    condition: str, setting: str, number: int, scratch: Path, args: argparse.Namespace
) -> Run:
    run_dir = scratch / f"{condition}-{setting}-{number}"
    started = time.perf_counter()
    done = subprocess.run(
        train_command(setting, run_dir, args),
        env=user_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"graft train ({condition}, {setting}) failed:\n{done.stderr}")
    step_seconds, metrics = read_metrics(run_dir)
    return Run(condition, setting, number, step_seconds, wall, metrics)


def rotated(settings: list[str], number: int) -> list[str]:
    shift = number % len(settings)
    return settings[shift:] + settings[:shift]


def measure(args: argparse.Namespace) -> list[Run]:
    """Every round: each condition, each setting once in this round's order."""
    runs = []
    with tempfile.TemporaryDirectory() as directory:
        for number in range(args.rounds):
            for condition in args.conditions:
                busy = competitor(args.competitor_threads) if condition == "beside" else None
                with busy or contextlib.nullcontext():
                    for setting in rotated(args.settings, number):
                        run = run_once(condition, setting, number, Path(directory), args)
                        runs.append(run)
                        print(
                            f"round {number} {condition:<6} threads {setting:<8}"
                            f"steps {run.step_seconds:7.2f} s, wall {run.wall_seconds:7.2f} s",
                            flush=True,
                        )
    return runs


def summarise(runs: list[Run]) -> dict[str, dict[str, dict]]:
    """condition -> setting -> medians, the ratio to the best setting and its range."""
    summary: dict[str, dict[str, dict]] = {}
    for condition in dict.fromkeys(run.condition for run in runs):
        mine = [run for run in runs if run.condition == condition]
        by_setting: dict[str, dict[int, Run]] = {}
        for run in mine:
            by_setting.setdefault(run.setting, {})[run.round] = run
        medians = {
            setting: statistics.median(r.step_seconds for r in rounds.values())
            for setting, rounds in by_setting.items()
        }
        best = min(medians, key=medians.__getitem__)
        summary[condition] = {}
        for setting, rounds in by_setting.items():
            ratios = [r.step_seconds / by_setting[best][n].step_seconds for n, r in rounds.items()]
            identical = {r.metrics for r in runs if r.setting == setting}
            summary[condition][setting] = {
                "runs": len(rounds),
                "step_seconds": medians[setting],
                "wall_seconds": statistics.median(r.wall_seconds for r in rounds.values()),
                "ratio_to_best": medians[setting] / medians[best],
                "ratio_range": [min(ratios), max(ratios)],
                "best": setting == best,
                "identical": len(identical) == 1,
            }
    return summary


def format_report(summary: dict[str, dict[str, dict]]) -> str:
    lines = [
        f"{'condition':<11}{'threads':<10}{'runs':>5}{'steps s':>10}{'wall s':>9}"
        f"{'ratio to best':>15}{'range':>13}{'identical':>11}"
    ]
    for condition, settings in summary.items():
        for setting, row in settings.items():
            low, high = row["ratio_range"]
            lines.append(
                f"{condition:<11}{setting:<10}{row['runs']:>5}{row['step_seconds']:>10.2f}"
                f"{row['wall_seconds']:>9.2f}{row['ratio_to_best']:>14.2f}x"
                f"{low:>7.2f}-{high:.2f}x{'yes' if row['identical'] else 'no':>11}"
            )
    defaults = {
        c: s[DEFAULT_SETTING]["ratio_to_best"] for c, s in summary.items() if DEFAULT_SETTING in s
    }
    if defaults:
        figures = ", ".join(f"{c} {ratio:.2f}x" for c, ratio in defaults.items())
        lines += ["", f"default / best setting: {figures} (target <= 1.20x in both)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each setting and condition")
    parser.add_argument(
        "--settings", nargs="+", default=["1", "2", DEFAULT_SETTING], help="threads=N or 'default'"
    )
    parser.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=CONDITIONS)
    parser.add_argument("--competitor-threads", type=int, default=2)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="graft train config")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, default=None, help="also write every run here")
    args = parser.parse_args(argv)
    bad = [s for s in args.settings if s != DEFAULT_SETTING and not (s.isdigit() and int(s) >= 1)]
    if bad or args.rounds < 1:
        parser.error(f"--settings takes thread counts >= 1 or 'default' (got {bad}), --rounds >= 1")
    runs = measure(args)
    summary = summarise(runs)
    print(f"\n{args.rounds} rounds, {os.cpu_count()} CPUs; medians of each setting's runs")
    print(format_report(summary))
    if args.json:
        report = {
            "args": {k: str(v) for k, v in vars(args).items()},
            "summary": summary,
            "runs": [{**asdict(run), "metrics": len(run.metrics)} for run in runs],
        }
        args.json.write_text(json.dumps(report, indent=2))
    return summary


if __name__ == "__main__":
    main()
