"""graft-library's peer: the stored groups of a trajectory library, looked up by prompt.

Each step the receiver's all-fail prompts (k_R = 0) are looked up by key in the library;
every group found (of size n, and of the named model under choose='model') is
re-verified with this project's verifier against the receiver's own gold answer
(GRAFT-SPEC §9), and one group per prompt becomes the prompt's peer group
(`choose_group`). The peer is then one more agent of the step's rollouts, `LIBRARY_AGENT`,
and graft-stored's exchange runs unchanged on it: the same gate (Eq.4, every candidate:
one-way, no balancing), compatibility weights from the stored generation log-probs,
floor and update.

[project choice] A prompt the library cannot rescue (the receiver solved it, or no stored
group can pass Eq.4) gets the receiver's own group as its "peer" group: Eq.4 can never
select it (it needs k_R = 0 and k_S >= 1, and there k_S = k_R), so the gate sees exactly
the library's groups and the exchange needs no change, without any made-up responses.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from algorithms.config import AlgorithmConfig
from algorithms.core import exchange_candidates
from algorithms.library.choice import choose_group
from algorithms.library.format import (
    LIBRARY_AGENT,
    LibraryError,
    LibraryGroup,
    load_library,
    prompt_key,
)
from algorithms.library.staleness import staleness_metrics
from graft_env.types import AgentRollouts, TransferredGroup

Verify = Callable[[Sequence[int], Mapping[str, Sequence[Sequence[str]]]], tuple[dict, dict]]
"""`MultiAgentMathEnv.score_groups`: rewards and infos of groups for dataset items."""


@dataclass
class Lookup:
    """What one step found in the library."""

    rollouts: AgentRollouts  # the peer's rows of the step's batch
    chosen: dict[int, LibraryGroup]  # batch prompt -> its library peer group
    step_ages: dict[int, int | None]  # batch prompt -> its group's age in source steps
    time: float  # when it was looked up (Unix time)
    counts: dict[str, float] = field(default_factory=dict)


def _fit(group: LibraryGroup, ours: set[str], n: int, model: str | None) -> str:
    """Whether a stored group can serve a run with problem keys `ours`, group size `n` and
    model filter `model` ('usable'), or why not."""
    if group.key not in ours:
        return "other_problem"
    if group.n != n:
        return "other_size"
    return "usable" if model is None or group.model_id == model else "other_model"


def _left_out(
    groups: Sequence[LibraryGroup], fits: Sequence[str], n: int, model: str | None
) -> str:
    """How many groups each reason of `_fit` (`fits`, one per group) leaves out."""
    count = Counter(fits)
    sizes = Counter(g.n for g, fit in zip(groups, fits, strict=True) if fit == "other_size")
    shown = ", ".join(f"n={size}: {sizes[size]}" for size in sorted(sizes))
    parts = [f"{count['other_size']} of another size than n={n}" + (f" ({shown})" if shown else "")]
    if model is not None:
        parts.append(f"{count['other_model']} of other models than {model}")
    parts.append(f"{count['other_problem']} of problems not in this run's dataset")
    return ", ".join(parts)


class LibrarySource:
    """A trajectory library as seen by one receiver run (its dataset, n and gate rule).

    `summary` says in one line how many of the library's groups the run can use and why
    the others are left out (another group size, another model, another problem)."""

    def __init__(
        self,
        path: str,
        choose: str,
        model: str | None,
        problem_texts: Sequence[str],
        config: AlgorithmConfig,
    ) -> None:
        if config.selection != "gate":
            raise LibraryError(
                f"selection={config.selection!r} draws prompts without the gate, and a library "
                "holds groups for few prompts: graft-library selects with the gate (Eq.4) only"
            )
        self.choose, self.n, self.candidates = choose, config.n, config.candidates
        self.keys = [prompt_key(text) for text in problem_texts]
        ours = set(self.keys)
        library = load_library(path)
        self.manifest_sha256 = library.manifest_sha256
        fits = [_fit(group, ours, self.n, model) for group in library.groups]
        self.by_key: dict[str, list[LibraryGroup]] = {}
        for group, fit in zip(library.groups, fits, strict=True):
            if fit == "usable":
                self.by_key.setdefault(group.key, []).append(group)
        # Step age within the source run: how many of its own steps it went on for after
        # writing the group (its last stored step here - the group's step).
        self.last_steps: dict[str, int] = {}
        for g in library.groups:
            if g.step is not None:
                self.last_steps[g.source] = max(g.step, self.last_steps.get(g.source, g.step))
        usable = [group for found in self.by_key.values() for group in found]
        left_out = _left_out(library.groups, fits, self.n, model)
        self.summary = (
            f"library {path}: {len(usable)} of its {len(fits)} groups are usable by this run "
            f"({left_out})"
        )
        unscored = [g for g in usable if "missing" in g.logprob_origins]
        if unscored:
            first = unscored[0]
            raise LibraryError(
                f"{path}: {len(unscored)} of the groups this run can use have no generation "
                f"log-probs (e.g. {first.group_id}, model {first.model_id}), and the "
                "compatibility score s = exp(l_R - l_S) needs them: import their file again "
                f"into a new library, as a library holds each group once (graft library import "
                f"{first.source} --model {first.model_id} --score-with {first.model_id} and "
                "the first import's other options --out NEW_LIBRARY; add the other sources to "
                "it with --append)"
            )
        if not usable:
            raise LibraryError(
                f"{path}: none of its {len(fits)} groups is usable by this run ({left_out})"
            )

    def lookup(self, receiver: AgentRollouts, indices: Sequence[int], verify: Verify) -> Lookup:
        """The peer rows for the receiver's batch (dataset items `indices`): the chosen
        library group at each all-fail prompt that one can rescue, the receiver's own
        group elsewhere (see the module docstring)."""
        found = {
            p: self.by_key[self.keys[indices[p]]]
            for p in np.flatnonzero(receiver.k == 0).tolist()
            if self.keys[indices[p]] in self.by_key
        }
        items = [(p, group) for p, groups in found.items() for group in groups]
        rewards = np.empty((0, self.n))
        if items:
            verified, _ = verify(
                [indices[p] for p, _ in items], {LIBRARY_AGENT: [g.texts for _, g in items]}
            )
            rewards = verified[LIBRARY_AGENT]
        ks = rewards.sum(axis=1).astype(np.int64)
        eligible = set(exchange_candidates(ks, np.zeros_like(ks), self.n, self.candidates).tolist())
        chosen: dict[int, tuple[LibraryGroup, np.ndarray]] = {}
        for p in found:
            rows = [j for j, (q, _) in enumerate(items) if q == p and j in eligible]
            if rows:
                pick = rows[choose_group([items[j][1] for j in rows], ks[rows], self.choose)]
                chosen[p] = (items[pick][1], rewards[pick])
        changed = sum(
            int(np.count_nonzero(group.rewards != rewards[j])) for j, (_, group) in enumerate(items)
        )
        return Lookup(
            rollouts=self._peer_rollouts(receiver, chosen),
            chosen={p: group for p, (group, _) in chosen.items()},
            step_ages={
                p: None if group.step is None else self.last_steps[group.source] - group.step
                for p, (group, _) in chosen.items()
            },
            time=time.time(),
            counts={
                "library/all_fail_prompts": float(np.count_nonzero(receiver.k == 0)),
                "library/found_prompts": float(len(found)),
                "library/groups_verified": float(len(items)),
                "library/rescuable_prompts": float(len(chosen)),
                "library/reward_changed_on_reverify": float(changed),
            },
        )

    def _peer_rollouts(
        self, receiver: AgentRollouts, chosen: Mapping[int, tuple[LibraryGroup, np.ndarray]]
    ) -> AgentRollouts:
        def column(own: list, library: Callable[[LibraryGroup], list]) -> list:
            return [library(chosen[p][0]) if p in chosen else own[p] for p in range(len(own))]

        rewards = receiver.rewards.copy()
        for p, (_, verified) in chosen.items():
            rewards[p] = verified
        return AgentRollouts(
            agent=LIBRARY_AGENT,
            prompt_ids=list(receiver.prompt_ids),
            prompts=list(receiver.prompts),
            texts=column(receiver.texts, lambda g: list(g.texts)),
            token_ids=column(receiver.token_ids, lambda g: [ids or [] for ids in g.token_ids]),
            logprobs=column(receiver.logprobs, lambda g: list(g.logprobs)),
            finish_reasons=column(receiver.finish_reasons, lambda g: list(g.finish_reasons)),
            rewards=rewards,
        )


def lookup_metrics(lookup: Lookup, transfers: Sequence[TransferredGroup]) -> dict[str, float]:
    """The step's library counts and the staleness of the groups it transferred."""
    used = [group for group in transfers if group.source == LIBRARY_AGENT]
    return {
        **lookup.counts,
        "library/used_groups": float(len(used)),
        "library/rescued_prompts": float(sum(bool(np.any(g.weights > 0)) for g in used)),
        **staleness_metrics(
            lookup.time,
            [lookup.step_ages[group.prompt_index] for group in used],
            [lookup.chosen[group.prompt_index].generated_at for group in used],
            [group.weights for group in used],
        ),
    }
