"""The evaluation protocol of GRAFT-SPEC §10: avg@k pass@1 per benchmark, mean ± std over repeats.

For every benchmark each problem gets `k` samples (paper: k = 8, temperature 0.6, top-p
0.95, at most 4,096 new tokens); pass@1 is the mean correctness over the k samples, then
over the problems (avg@k), and the headline is the unweighted mean of the benchmarks. The
whole protocol is run `repeats` times with different seeds and reported as mean ± std.

Nothing is thrown away: every sample is kept (text, extracted answer, verdict, verifier
status, finish reason), per-problem success counts are kept per repeat (so all-fail shares
and the complementarity of two models can be computed afterwards, GRAFT-SPEC §12), and
verifier failures and truncated generations are counted rather than folded into "wrong".

A model's context limit shapes the budget: a policy that says how many positions it has
(`max_positions`, with `encode_prompt` to measure prompts: HFPolicy and VLLMPolicy do) gives
each response at most what its prompt leaves, and a prompt that leaves no room is skipped
and counted (`BenchmarkResult.skipped`, "<set>/n_skipped"), never silently dropped.
`on_batch` sees the result after every batch, so an interrupted evaluation keeps what
finished (`graft eval` writes it).

    from graft_env.eval.evaluate import evaluate
    result = evaluate(policy, ["math500", "aime24"], k=8, data_dir="../shared/data")
    print(report.render_markdown(result))  # graft_env.eval.report: JSON, CSV, Markdown
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from graft_env.data import Problem, load
from graft_env.eval import report
from graft_env.eval.batches import Verifier, batch_seed, evaluate_sets
from graft_env.eval.protocol import PROTOCOL
from graft_env.eval.results import EvalResult, Sample
from graft_env.eval.tally import Tally, new_token_budgets, policy_name
from graft_env.policies.base import Policy, SamplingParams
from graft_env.rewards import default_pool

__all__ = [
    "PAPER_BENCHMARKS",
    "EvalResult",
    "Verifier",
    "batch_seed",
    "evaluate",
    "new_token_budgets",
]

PAPER_BENCHMARKS = ("math500", "aime24", "aime25", "amc23", "minerva")
"""The five benchmarks of the paper's evaluation suite, in its table order."""


def evaluate(
    policy: Policy,
    datasets: Sequence[str] | Mapping[str, list[Problem]],
    *,
    k: int = PROTOCOL.k,
    temperature: float = PROTOCOL.temperature,
    top_p: float = PROTOCOL.top_p,
    max_new_tokens: int = PROTOCOL.max_new_tokens,
    repeats: int = PROTOCOL.repeats,
    limit: int | None = None,
    seed: int = PROTOCOL.seed,
    data_dir: str | Path | None = None,
    batch_size: int = PROTOCOL.batch_size,
    verifier: Verifier | None = None,
    progress: bool = False,
    on_batch: Callable[[EvalResult], None] | None = None,
) -> EvalResult:
    """Run the §10 protocol for `policy` on each benchmark (names to load, or name -> problems).

    `limit` keeps the first N problems of each set. Repeat r samples with seed `seed + r`;
    each generate call (`batch_size` problems x k samples) gets its own seed derived from
    (seed + r, benchmark, batch number). `verifier` defaults to the shared verifier pool.
    `on_batch(result)` is called after each batch is verified, with the result so far
    (`config["complete"]` False until the last batch): the problems finished in every repeat,
    and every sample verified so far.
    """
    for field_name, value, minimum in (
        ("k", k, 1),
        ("repeats", repeats, 1),
        ("batch_size", batch_size, 1),
        ("seed", seed, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"evaluate: {field_name} must be an int >= {minimum}, got {value!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"evaluate: limit must be None or an int >= 1, got {limit!r}")
    sampling = SamplingParams(temperature, top_p, max_new_tokens, seed)  # validates the values
    sets = _resolve_datasets(datasets, data_dir, limit)
    positions = _positions(policy)
    tallies = [
        Tally.fitted(name, problems, policy, positions, max_new_tokens, k, repeats, progress)
        for name, problems in sets.items()
    ]
    checker = default_pool() if verifier is None else verifier
    provenance = report.run_provenance()
    started = time.perf_counter()
    config = {
        "datasets": list(sets),
        "k": k,
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "repeat_seeds": [seed + r for r in range(repeats)],
        "limit": limit,
        "seed": seed,
        "batch_size": batch_size,
        "data_dir": None if data_dir is None else str(data_dir),
        "max_positions": positions,
    }
    samples: list[Sample] = []

    def result() -> EvalResult:
        complete = all(tally.complete for tally in tallies)
        return EvalResult(
            policy=policy_name(policy),
            config={**config, "complete": complete},
            benchmarks={t.name: t.result() for t in tallies if t.finished},
            samples=list(samples),
            provenance=provenance,
            total_seconds=time.perf_counter() - started,
        )

    def recorded(new: list[Sample]) -> None:
        samples.extend(new)
        if on_batch is not None:
            on_batch(result())

    evaluate_sets(policy, tallies, batch_size, sampling, checker, recorded, progress)
    return result()


def _positions(policy: Policy) -> int | None:
    """The model's context (prompt + response tokens), when the policy says what it is and
    can measure a prompt; None: no limit known."""
    positions = getattr(policy, "max_positions", None)
    return positions if positions is not None and hasattr(policy, "encode_prompt") else None


def _resolve_datasets(
    datasets: Sequence[str] | Mapping[str, list[Problem]],
    data_dir: str | Path | None,
    limit: int | None,
) -> dict[str, list[Problem]]:
    """Name -> problems (first `limit` of each), checked: non-empty, Problems, unique ids."""
    if isinstance(datasets, str):
        raise TypeError(
            f"evaluate: datasets must be a list of names or a mapping, got the string "
            f"{datasets!r}; pass [{datasets!r}]"
        )
    if isinstance(datasets, Mapping):
        named = {str(name): list(problems) for name, problems in datasets.items()}
    else:
        names = list(datasets)
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"evaluate: datasets named more than once: {repeated}")
        named = {name: load(name, data_dir=data_dir) for name in names}
    if not named:
        raise ValueError("evaluate: no datasets given")
    for name, problems in named.items():
        if not problems:
            raise ValueError(f"evaluate: dataset {name!r} has no problems")
        seen: set[str] = set()
        for index, problem in enumerate(problems):
            if not isinstance(problem, Problem):
                raise TypeError(
                    f"evaluate: dataset {name!r} item {index} is a {type(problem).__name__}, "
                    "not a Problem"
                )
            if problem.id in seen:
                raise ValueError(f"evaluate: dataset {name!r} has problem id {problem.id!r} twice")
            seen.add(problem.id)
    return {name: problems[:limit] for name, problems in named.items()}
