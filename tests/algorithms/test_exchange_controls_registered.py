"""The peer controls give what the registered cells ran: on two fixed fixture steps the
shuffled-reward and twin peers' transfers (which prompts move from which source, the
advantages, the weights) and stats equal literal values, taken by running these same steps
on the registration commit 9678cbf (docs/study/GAP-CONTROLS-PREREGISTRATION.md).

Every number follows from the fixture's rewards, the scorer's table and the step seeds, not
from trained weights: sources, prompts and texts are compared exactly, advantages and weights
to 1e-5 (Eq.1's epsilon makes 1/2 0.499999), the stats to 1e-6."""

from __future__ import annotations

import pytest

from algorithms.exchange.resample import ResamplingScorer
from algorithms.testing import PAIR, N, TextScorer, make_rollouts, run_exchange
from graft_env.types import AgentRollouts, TransferredGroup

MAX_ROUND = 8  # the twin's TWIN_MAX_ROUNDS at 9678cbf


def mean_logp(prompt: int, response: int, round_: int) -> float:
    """The scorer's table: the receiver's mean log-prob of one text, by its indices."""
    return -1.0 - 0.25 * ((prompt + 2 * response + round_) % 4)


MEAN_LOGP = {
    f"{agent} p{p} r{i} {verdict}{f' round {r}' if r else ''}": mean_logp(p, i, r)
    for agent in PAIR
    for p in range(len(PAIR["A"]))
    for i in range(N)
    for verdict in ("right", "wrong")
    for r in range(MAX_ROUND + 1)
}


def twin_script(prompt: int, round_: int) -> int:
    """Successes of the twin's group on `prompt` in `round_`; prompt 2 never informative."""
    return 0 if prompt == 2 else [0, N, 1, 0, 3, 2][(prompt + round_) % 6]


def twin_resample(agent: str, prompts: list[int], round_: int) -> AgentRollouts:
    """The receiver's group on each prompt, its texts marked with the round."""
    rollouts = make_rollouts(agent, [twin_script(p, round_) for p in prompts])
    rollouts.texts = [[f"{t} round {round_}" for t in group] for group in rollouts.texts]
    return rollouts


def shuffled_step() -> tuple[dict[str, list[TransferredGroup]], dict[str, float]]:
    """One graft-shuffled step on PAIR, seed 3."""
    _, _, transfers, stats = run_exchange(
        "graft", PAIR, scorer=TextScorer(MEAN_LOGP), seed=3, exchange="graft-shuffled"
    )
    return transfers, stats.summary()


def twin_step() -> tuple[dict[str, list[TransferredGroup]], dict[str, float]]:
    """One graft-twin step on PAIR, seed 0, resampling by `twin_script`."""
    scorer = ResamplingScorer(TextScorer(MEAN_LOGP), twin_resample)
    _, _, transfers, stats = run_exchange("graft", PAIR, scorer=scorer, exchange="graft-twin")
    return transfers, stats.summary()


def moved(transfers: dict[str, list[TransferredGroup]]) -> dict[str, list[tuple]]:
    """Per receiver: (source, prompt, first text, advantages, weights) of each group."""
    return {
        receiver: [
            (g.source, g.prompt_index, g.texts[0], list(g.advantages), list(g.weights))
            for g in groups
        ]
        for receiver, groups in transfers.items()
    }


def split(groups: dict[str, list[tuple]]) -> tuple[dict[str, list[tuple]], list[float]]:
    """`moved`'s groups as what must be equal (sources, prompts, texts) and the numbers
    (advantages, then weights, group by group), for `pytest.approx`."""
    names = {r: [group[:3] for group in gs] for r, gs in groups.items()}
    numbers = [float(x) for r in sorted(groups) for g in groups[r] for x in (*g[3], *g[4])]
    return names, numbers


def direction(
    pair: str, counts: tuple[int, ...], mean_s: float | None = None, **extra: int
) -> dict:
    """A direction's summary metrics: counts = (candidates, gate_candidates or -1 for none,
    prompts, transferred, admitted, removed_by_weight, removed_failures); mean_s where
    something moved, mean_w_admitted (1: every weight here is 0 or 1) where any is admitted."""
    names = ("candidates", "gate_candidates", "prompts", "transferred", "admitted")
    names += ("removed_by_weight", "removed_failures")
    metrics = {f"exchange/{pair}/{k}": float(v) for k, v in zip(names, counts, strict=True)}
    metrics = {k: v for k, v in metrics.items() if v >= 0}
    if mean_s is not None:
        metrics[f"exchange/{pair}/mean_s"] = mean_s
    if counts[4]:
        metrics[f"exchange/{pair}/mean_w_admitted"] = 1.0
    return metrics | {f"exchange/{pair}/{k}": float(v) for k, v in extra.items()}


HALF, SQRT3_2 = 0.5, 0.866025  # Eq.1 advantages with 3 or 1 of 4 right, and with 2 of 4

SHUFFLED_GROUPS = {
    "A": [
        ("B", 0, "B p0 r0 right", [HALF, -3 * HALF, HALF, HALF], [1, 0, 1, 0]),
        ("B", 2, "B p2 r0 right", [HALF, HALF, HALF, -3 * HALF], [0, 1, 0, 1]),
    ],
    "B": [("A", 4, "A p4 r0 right", [-SQRT3_2, -SQRT3_2, SQRT3_2, SQRT3_2], [1, 0, 1, 0])],
}
MOVED = "graft-shuffled/rewards_moved"  # responses whose reward the permutation moved
SHUFFLED_STATS = {
    **direction("A->B", (1, 1, 1, 4, 2, 2, 0), 0.803265, **{MOVED: 4}),
    **direction("B->A", (3, 3, 2, 8, 4, 4, 0), 0.803265, **{MOVED: 2}),
}
TWIN_GROUPS = {
    "A": [("A~twin", 0, "A p0 r0 right round 2", [3 * HALF, -HALF, -HALF, -HALF], [0, 1, 0, 1])],
    "B": [("B~twin", 4, "B p0 r0 right round 1", [SQRT3_2, SQRT3_2, -SQRT3_2, -SQRT3_2], [0] * 4)],
}


def twin_counts(gated: int, filled: int, rounds: int, drawn: int) -> dict[str, int]:
    """The twin's own counters, `graft-twin/<name>`."""
    values = dict(gated_prompts=gated, filled_prompts=filled, rounds=rounds)
    return {f"graft-twin/{k}": v for k, v in (values | {"resampled_responses": drawn}).items()}


TWIN_STATS = {  # A: prompts 0 and 2 in rounds 1-2, prompt 2 alone in 3-8: 16 + 24 drawn
    **direction("A->B", (1, 1, 0, 0, 0, 0, 0)),
    **direction("B->A", (3, 3, 0, 0, 0, 0, 0)),
    **direction("A~twin->A", (0, -1, 1, 4, 2, 2, 0), 0.803265, **twin_counts(2, 1, 8, 40)),
    **direction("B~twin->B", (0, -1, 1, 4, 0, 4, 0), 0.625584, **twin_counts(1, 1, 1, 4)),
}


@pytest.mark.parametrize(
    ("step", "groups", "stats"),
    [(shuffled_step, SHUFFLED_GROUPS, SHUFFLED_STATS), (twin_step, TWIN_GROUPS, TWIN_STATS)],
    ids=["graft-shuffled", "graft-twin"],
)
def test_a_control_step_equals_the_registration_commits(step, groups, stats):
    transfers, summary = step()
    names, numbers = split(moved(transfers))
    expected_names, expected_numbers = split(groups)
    assert names == expected_names
    assert numbers == pytest.approx(expected_numbers, abs=1e-5)  # Eq.1's epsilon
    assert summary == pytest.approx(stats, abs=1e-6)
