"""Evaluation during training, and the best checkpoint per agent.

Every `eval.every` steps, and after the last step, each live policy is evaluated with the
benchmark harness (`graft_env.eval.evaluate.evaluate`, SPEC §10 protocol) on the configured
sets; the summary goes into that step's metrics row as `eval/...` keys, and when the
configured metric improves the policy is saved to ``best/<agent>/`` with ``best.json``
recording the step and value. A run that starts at step 0 is also evaluated before its
first update, into step 0's row as `eval_start/...` keys (with `time/eval_start`), the point
every learning curve starts from; the untrained policy is not a best checkpoint. Dataset
names are registry names, or ``procedural/<skill>`` for one held-out procedural skill (its
test split).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from algorithms.storage.yaml_schema import Count
from algorithms.training.eval_settings import EvalSettings, sampling_args
from graft_env.data import Problem, load
from graft_env.data.procedural import SKILLS

if TYPE_CHECKING:  # the policies pull in torch, which `graft train --help` must not wait for
    from graft_env.policies import Policy

log = logging.getLogger(__name__)


EVAL_TIMES = ("time/eval", "time/eval_start")
"""The metrics keys of the evaluations' seconds (all agents together, in every agent's row
of the step): not training time."""


@dataclass(frozen=True)
class EvalSpec(EvalSettings):
    """What to evaluate during training (absent or `every: 0`: no evaluation), sampled as
    `EvalSettings` says."""

    every: Count = field(default=0, metadata={"help": "steps between evaluations (0: none)"})
    datasets: tuple[str, ...] = field(
        default=(), metadata={"help": "dataset names, or procedural/<skill> (its test split)"}
    )
    metric: str = field(
        default="average/pass@1", metadata={"help": "summary key that picks the best checkpoint"}
    )

    def __post_init__(self) -> None:
        if isinstance(self.datasets, str) or not isinstance(self.datasets, Sequence):
            raise ValueError(f"eval.datasets must be a list of names, got {self.datasets!r}")
        object.__setattr__(self, "datasets", tuple(self.datasets))  # YAML gives lists
        if self.every and not self.datasets:
            raise ValueError("eval.every is set but eval.datasets is empty")


def eval_sets(
    names: Sequence[str],
    data_dir: str | os.PathLike | None,
    limit: int | None,
    procedural: Mapping[str, Any] | None = None,
    distinct: bool = False,
    source: str = "auto",
) -> dict[str, list[Problem]]:
    """Problems per named set (the first `limit`); `procedural/<skill>` is that skill's
    held-out test set, generated with the `procedural` options (difficulty, seed). The
    other sets are read from `source` (`graft_env.data.benchmarks.choose_source`).

    distinct: keep only the first occurrence of each problem text among those `limit`
    (a small procedural level draws the same question several times: 200 level-1
    multiplication test items hold about 90 distinct questions), so that a bootstrap over
    problems resamples independent problems.
    """
    sets = {}
    for name in names:
        if name.startswith("procedural/"):
            skill = name.split("/", 1)[1]
            if skill not in SKILLS:
                raise ValueError(f"eval.datasets: unknown procedural skill {skill!r}; {SKILLS}")
            options = {"size": limit or 100, **(procedural or {})}
            sets[name] = load("procedural", "test", skills=[skill], **options)
        else:
            problems = load(name, data_dir=data_dir, source=source)
            sets[name] = problems[:limit] if limit else problems
    if distinct:
        sets = {name: _distinct(problems) for name, problems in sets.items()}
    return sets


def _distinct(problems: Sequence[Problem]) -> list[Problem]:
    seen: set[str] = set()
    kept = []
    for problem in problems:
        if problem.problem not in seen:
            seen.add(problem.problem)
            kept.append(problem)
    return kept


class PeriodicEvaluator:
    """Runs the harness on a schedule and keeps each agent's best checkpoint."""

    def __init__(self, spec: EvalSpec, run_dir: Path, data_dir: str | None) -> None:
        self.spec = spec
        self.best_dir = run_dir / "best"
        self.sets = (
            eval_sets(
                spec.datasets, data_dir, spec.limit, spec.procedural, spec.distinct, spec.source
            )
            if spec.every
            else {}
        )

    def due(self, completed_steps: int, total_steps: int) -> bool:
        every = self.spec.every
        return bool(every) and (completed_steps % every == 0 or completed_steps == total_steps)

    def best(self, agent: str) -> dict | None:
        path = self.best_dir / agent / "best.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def _save_best(self, name: str, policy: Policy, record: dict) -> None:
        """Replace best/<name> atomically: a half-written best never shadows the old one."""
        final, tmp = self.best_dir / name, self.best_dir / f".{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        policy.save(tmp)
        (tmp / "best.json").write_text(json.dumps(record, indent=2))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)

    def run(self, policies: Mapping[str, Policy], step: int) -> dict[str, dict[str, float]]:
        """Evaluate every policy; save it as best when the metric improved."""
        spec, out = self.spec, {}
        for name, policy in policies.items():
            summary = self._summary(policy)
            value = float(summary[spec.metric])
            previous = self.best(name)
            if previous is None or value > previous["value"]:
                self._save_best(name, policy, {"step": step, "metric": spec.metric, "value": value})
            out[name] = {f"eval/{key}": float(v) for key, v in summary.items()}
        return out

    def before_training(self, policies: Mapping[str, Policy]) -> dict[str, dict[str, float]]:
        """Every policy's evaluation before its first update, as `eval_start/...` keys and the
        seconds it took (`time/eval_start`, all policies together); empty when no evaluation
        is configured."""
        if not self.spec.every:
            return {}
        sizes = ", ".join(f"{name} ({len(problems)})" for name, problems in self.sets.items())
        log.info("held-out evaluation before training, k = %d: %s", self.spec.k, sizes)
        started = time.perf_counter()
        out = {
            name: {f"eval_start/{key}": float(v) for key, v in self._summary(policy).items()}
            for name, policy in policies.items()
        }
        seconds = time.perf_counter() - started
        return {name: {**values, "time/eval_start": seconds} for name, values in out.items()}

    def _summary(self, policy: Policy) -> dict[str, Any]:
        """The harness's summary of `policy` on the sets; the metric must be one of its keys."""
        from graft_env.eval.evaluate import evaluate

        summary = evaluate(policy, self.sets, **sampling_args(self.spec)).summary()
        if self.spec.metric not in summary:
            raise ValueError(f"eval.metric {self.spec.metric!r} is not one of {sorted(summary)}")
        return summary
