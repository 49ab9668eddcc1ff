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

import logging
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from graft_env.data import Problem, load
from graft_env.eval import report
from graft_env.eval.protocol import PROTOCOL
from graft_env.eval.results import BenchmarkResult, EvalResult, Sample
from graft_env.policies.base import FINISH_REASONS, Generation, Policy, SamplingParams
from graft_env.rewards import Verdict, default_pool, status_counts

PAPER_BENCHMARKS = ("math500", "aime24", "aime25", "amc23", "minerva")
"""The five benchmarks of the paper's evaluation suite, in its table order."""

log = logging.getLogger(__name__)


class Verifier(Protocol):
    """Anything that scores responses against gold answers, e.g. a `VerifierPool`."""

    def verify_batch(self, responses: Sequence[str], golds: Sequence[str]) -> list[Verdict]: ...


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
        _Tally.fitted(name, problems, policy, positions, max_new_tokens, k, repeats, progress)
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
            policy=_name(policy),
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

    _evaluate_sets(policy, tallies, batch_size, sampling, checker, recorded, progress)
    return result()


def _name(policy: Policy) -> str:
    return str(getattr(policy, "name", type(policy).__name__))


def _positions(policy: Policy) -> int | None:
    """The model's context (prompt + response tokens), when the policy says what it is and
    can measure a prompt; None: no limit known."""
    positions = getattr(policy, "max_positions", None)
    return positions if positions is not None and hasattr(policy, "encode_prompt") else None


def new_token_budgets(
    prompt_lengths: Sequence[int], positions: int, max_new_tokens: int
) -> list[int]:
    """Each prompt's response budget: `max_new_tokens`, or what the model's positions leave
    after the prompt when that is less; 0 for a prompt that leaves no room."""
    return [max(0, min(max_new_tokens, positions - length)) for length in prompt_lengths]


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


def batch_seed(
    repeat_seed: int, benchmark: str, batch_index: int, budget: int | None = None
) -> int:
    """Seed of one generate call; crc32 (not `hash`) so it is the same in every process.

    A batch whose prompts the context limit gave other budgets than max_new_tokens is
    sampled in one call per budget; such a call's seed mixes in its `budget` (None: the
    requested max_new_tokens, the batch's only call when the limit changes nothing)."""
    entropy = [repeat_seed, zlib.crc32(benchmark.encode("utf-8")), batch_index]
    if budget is not None:
        entropy.append(budget)
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def _checked_groups(
    groups: Any, policy: Policy, benchmark: str, num_prompts: int, k: int
) -> list[list[Generation]]:
    """The policy's output, or a clear error when it is not num_prompts groups of k Generations."""
    who = f"policy {getattr(policy, 'name', policy)!r} on {benchmark!r}"
    if not isinstance(groups, list) or len(groups) != num_prompts:
        size = len(groups) if isinstance(groups, list) else type(groups).__name__
        raise ValueError(f"{who}: generate returned {size} groups for {num_prompts} prompts")
    for index, group in enumerate(groups):
        if len(group) != k or not all(isinstance(g, Generation) for g in group):
            raise ValueError(f"{who}: group {index} is not {k} Generation objects")
    return groups


@dataclass
class _Tally:
    """One benchmark's problems that fit the model (prompts, budgets) and its counts while
    its batches come in; `done[r]` problems (a prefix) are recorded in repeat r."""

    name: str
    problems: list[Problem]
    prompts: list[str]
    budgets: list[int]
    skipped: list[str]
    k: int
    repeats: int
    successes: list[list[int]] = field(init=False)
    done: list[int] = field(init=False)
    statuses: dict[str, int] = field(default_factory=lambda: status_counts([]))
    finishes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISH_REASONS, 0))
    tokens: int = 0
    generation_s: float = 0.0
    verification_s: float = 0.0

    def __post_init__(self) -> None:
        self.successes = [[0] * len(self.problems) for _ in range(self.repeats)]
        self.done = [0] * self.repeats

    @classmethod
    def fitted(
        cls,
        name: str,
        problems: list[Problem],
        policy: Policy,
        positions: int | None,
        max_new_tokens: int,
        k: int,
        repeats: int,
        progress: bool,
    ) -> _Tally:
        """The set as the model's context allows (see `new_token_budgets`), said in one line
        when that changes anything; a set no prompt of which fits is an error."""
        prompts = [policy.format_prompt(problem.problem) for problem in problems]
        if positions is None:
            budgets = [max_new_tokens] * len(prompts)
        else:
            lengths = [len(policy.encode_prompt(prompt)) for prompt in prompts]
            budgets = new_token_budgets(lengths, positions, max_new_tokens)
        kept = [i for i, budget in enumerate(budgets) if budget > 0]
        skipped = [problems[i].id for i, budget in enumerate(budgets) if budget == 0]
        if not kept:
            raise ValueError(
                f"evaluate: every {name!r} prompt is too long for {_name(policy)!r}'s "
                f"{positions} positions (the shortest has {min(lengths)} tokens)"
            )
        cut = sorted(budgets[i] for i in kept if budgets[i] < max_new_tokens)
        parts = []
        if cut:
            span = f"{cut[0]}-{cut[-1]}" if cut[0] < cut[-1] else f"{cut[0]}"
            parts.append(
                f"{len(cut)} of {len(problems)} prompts leave room for fewer than "
                f"{max_new_tokens} new tokens and get what fits ({span})"
            )
        if skipped:
            parts.append(
                f"{len(skipped)} of {len(problems)} leave none and are skipped (not in pass@1)"
            )
        if parts:
            _say(
                f"{name}: {_name(policy)!r} has {positions} positions: {'; '.join(parts)}", progress
            )
        return cls(
            name,
            [problems[i] for i in kept],
            [prompts[i] for i in kept],
            [budgets[i] for i in kept],
            skipped,
            k,
            repeats,
        )

    @property
    def finished(self) -> int:
        """Problems recorded in every repeat (a prefix: batches run in order)."""
        return min(self.done)

    @property
    def complete(self) -> bool:
        return self.finished == len(self.problems)

    def result(self) -> BenchmarkResult:
        """The problems finished in every repeat (all of them once the set is complete)."""
        finished = self.finished
        return BenchmarkResult(
            name=self.name,
            k=self.k,
            problem_ids=[problem.id for problem in self.problems[:finished]],
            successes=[row[:finished] for row in self.successes],
            status_counts=dict(self.statuses),  # copies: a partial result stays as it was
            finish_reasons=dict(self.finishes),
            generated_tokens=self.tokens,
            generation_seconds=self.generation_s,
            verification_seconds=self.verification_s,
            skipped=self.skipped,
        )


def _say(message: str, progress: bool) -> None:
    """A note on the run: on stderr beside the progress lines, else in the log."""
    if progress:
        print(f"[eval] {message}", file=sys.stderr, flush=True)
    else:
        log.info(message)


@dataclass(frozen=True)
class _Batch:
    """One batch: problems [start, start + len(groups)) of a benchmark in a repeat."""

    tally: _Tally
    repeat: int
    start: int
    groups: list[list[Generation]]


def _timed_verify(
    verifier: Verifier, texts: list[str], golds: list[str]
) -> tuple[list[Verdict], float]:
    started = time.perf_counter()
    verdicts = verifier.verify_batch(texts, golds)
    if len(verdicts) != len(texts):
        raise ValueError(f"verifier returned {len(verdicts)} verdicts for {len(texts)} responses")
    return verdicts, time.perf_counter() - started


def _evaluate_sets(
    policy: Policy,
    tallies: Sequence[_Tally],
    batch_size: int,
    sampling: SamplingParams,
    verifier: Verifier,
    recorded: Callable[[list[Sample]], None],
    progress: bool,
) -> None:
    """Every benchmark, repeat and batch in that order; hands each batch's samples to
    `recorded` once its tally has them.

    Verification runs in the verifier's worker processes, so each batch's responses are
    verified on a thread while the policy samples the next batch (the study's evaluation
    on tiny models spent ~8 % of its time waiting for verdicts). One batch is in flight at
    a time and results are recorded in batch order: the same result as one after another.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="evaluate-verify") as pool:
        pending: tuple[_Batch, Future] | None = None
        try:
            for tally in tallies:
                for repeat in range(tally.repeats):
                    for index, start in enumerate(range(0, len(tally.problems), batch_size)):
                        chunk = tally.problems[start : start + batch_size]
                        started = time.perf_counter()
                        groups = _generate_batch(
                            policy, tally, start, len(chunk), sampling, repeat, index
                        )
                        tally.generation_s += time.perf_counter() - started
                        texts = [g.text for group in groups for g in group]
                        golds = [problem.answer for problem in chunk for _ in range(tally.k)]
                        verifying = pool.submit(_timed_verify, verifier, texts, golds)
                        if pending is not None:
                            previous, pending = pending, None
                            recorded(_record(*previous, progress))
                        pending = (_Batch(tally, repeat, start, groups), verifying)
        finally:  # also when sampling stops (Ctrl-C, an error): the batch in verification counts
            if pending is not None:
                recorded(_record(*pending, progress))


def _generate_batch(
    policy: Policy,
    tally: _Tally,
    start: int,
    size: int,
    sampling: SamplingParams,
    repeat: int,
    batch_index: int,
) -> list[list[Generation]]:
    """The groups of problems [start, start + size), in order: one generate call per
    distinct new-token budget among them (one call unless the context limit cut some)."""
    budgets = tally.budgets[start : start + size]
    groups: list[list[Generation]] = [[] for _ in budgets]
    for budget in dict.fromkeys(budgets):  # first-seen order
        members = [i for i, b in enumerate(budgets) if b == budget]
        capped = None if budget == sampling.max_new_tokens else budget
        seed = batch_seed(sampling.seed + repeat, tally.name, batch_index, capped)
        generated = policy.generate(
            [tally.prompts[start + i] for i in members],
            tally.k,
            replace(sampling, seed=seed, max_new_tokens=budget),
        )
        generated = _checked_groups(generated, policy, tally.name, len(members), tally.k)
        for i, group in zip(members, generated, strict=True):
            groups[i] = group
    return groups


def _record(batch: _Batch, verifying: Future, progress: bool) -> list[Sample]:
    """Wait for one batch's verdicts, add them to its benchmark's tally; its samples."""
    verdicts, seconds = verifying.result()
    tally, k = batch.tally, batch.tally.k
    tally.verification_s += seconds
    successes = tally.successes[batch.repeat]
    samples = []
    for offset, group in enumerate(batch.groups):
        problem = tally.problems[batch.start + offset]
        for index, generation in enumerate(group):
            verdict = verdicts[offset * k + index]
            successes[batch.start + offset] += int(verdict.reward == 1.0)
            tally.statuses[verdict.status] += 1
            tally.finishes[generation.finish_reason] += 1
            tally.tokens += len(generation.token_ids)
            samples.append(_sample(tally.name, problem, batch.repeat, index, generation, verdict))
    done = tally.done[batch.repeat] = batch.start + len(batch.groups)
    if progress:
        solved = sum(successes[:done]) / (done * k)
        print(
            f"[eval] {tally.name} repeat {batch.repeat + 1}/{tally.repeats}: "
            f"{done}/{len(tally.problems)} problems, pass@1 so far {solved:.3f}",
            file=sys.stderr,
            flush=True,
        )
    return samples


def _sample(
    name: str, problem: Problem, repeat: int, index: int, generation: Generation, verdict: Verdict
) -> Sample:
    return Sample(
        benchmark=name,
        problem_id=problem.id,
        repeat=repeat,
        sample_index=index,
        text=generation.text,
        gold=problem.answer,
        extracted=verdict.extracted,
        reward=verdict.reward,
        status=verdict.status,
        finish_reason=generation.finish_reason,
        num_tokens=len(generation.token_ids),
    )
