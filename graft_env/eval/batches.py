"""The batches of an evaluation: each generate call (its seed, its new-token budget), its
verification on a thread while the next batch samples, and its verdicts recorded in order.
"""

from __future__ import annotations

import sys
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from graft_env.data import Problem
from graft_env.eval.results import Sample
from graft_env.eval.tally import Tally
from graft_env.policies.base import Generation, Policy, SamplingParams
from graft_env.rewards import Verdict


class Verifier(Protocol):
    """Anything that scores responses against gold answers, e.g. a `VerifierPool`."""

    def verify_batch(self, responses: Sequence[str], golds: Sequence[str]) -> list[Verdict]: ...


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


@dataclass(frozen=True)
class _Batch:
    """One batch: problems [start, start + len(groups)) of a benchmark in a repeat."""

    tally: Tally
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


def evaluate_sets(
    policy: Policy,
    tallies: Sequence[Tally],
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
    tally: Tally,
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
