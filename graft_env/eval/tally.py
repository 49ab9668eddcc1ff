"""One benchmark of an evaluation while it runs: which of its prompts fit the model's
context and with how many new tokens (`new_token_budgets`), and its counts as batches come in.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from graft_env.data import Problem
from graft_env.eval.results import BenchmarkResult
from graft_env.policies.base import FINISH_REASONS, Policy
from graft_env.rewards import status_counts

log = logging.getLogger("graft_env.eval.evaluate")  # evaluate()'s notes, whichever module says them


def policy_name(policy: Policy) -> str:
    """The name a result and its notes give the policy (its `name`, else its type)."""
    return str(getattr(policy, "name", type(policy).__name__))


def new_token_budgets(
    prompt_lengths: Sequence[int], positions: int, max_new_tokens: int
) -> list[int]:
    """Each prompt's response budget: `max_new_tokens`, or what the model's positions leave
    after the prompt when that is less; 0 for a prompt that leaves no room."""
    return [max(0, min(max_new_tokens, positions - length)) for length in prompt_lengths]


@dataclass
class Tally:
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
    ) -> Tally:
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
                f"evaluate: every {name!r} prompt is too long for {policy_name(policy)!r}'s "
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
                f"{name}: {policy_name(policy)!r} has {positions} positions: {'; '.join(parts)}",
                progress,
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
