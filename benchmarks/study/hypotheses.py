"""The pre-registered study's hypotheses (docs/study/PREREGISTRATION.md) and its table:
the study grid's labels, each hypothesis's paired contrast per model, its verdict and the
numbers that go with it, and the table's intervals and Δ vs the baseline
(`benchmarks.study.stats`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.compare.report import Record, set_names, table_rows
from benchmarks.study.stats import label_interval, paired_contrast, paired_difference, verdict

GRPO8, GRPO32, GRAFT = "GRPO n=8", "GRPO n=32", "GRAFT"
NO_COMPAT, NO_FLOOR = "GRAFT w/o compat. weights", "GRAFT w/o floor"
NO_BALANCE, STORED = "GRAFT w/o balancing", "GRAFT stored"
NO_GAIN = "unresolved (no live gain to keep)"


@dataclass(frozen=True)
class Hypothesis:
    """A pre-registered claim: `labels` weights of a paired contrast that the claim says is
    > -margin (margin 0: superiority; > 0: non-inferiority by `margin` points)."""

    name: str
    claim: str
    labels: Mapping[str, float]
    margin: float = 0.0
    skills: bool = False  # sets weighted +1/|weak| on the weak skills, -1/|own| on the own


HYPOTHESES = (
    Hypothesis("H1", f"{GRAFT} > {GRPO8}", {GRAFT: 1.0, GRPO8: -1.0}),
    Hypothesis("H2", f"{GRAFT} >= {GRPO32} (margin 1 point)", {GRAFT: 1.0, GRPO32: -1.0}, 1.0),
    Hypothesis("H3", "compatibility weighting helps", {GRAFT: 1.0, NO_COMPAT: -1.0}),
    Hypothesis("H4", "the floor helps", {GRAFT: 1.0, NO_FLOOR: -1.0}),
    Hypothesis("H5", "balancing helps", {GRAFT: 1.0, NO_BALANCE: -1.0}),
    Hypothesis(
        "H6",
        "stored peers keep more than half of the live gain",
        {STORED: 1.0, GRAFT: -0.5, GRPO8: -0.5},
    ),
    Hypothesis(
        "H7",
        "the gain comes from the weak skills (weak minus own)",
        {GRAFT: 1.0, GRPO8: -1.0},
        skills=True,
    ),
)


def skill_sets(records: Sequence[Record], model: str) -> tuple[list[str], list[str]]:
    """(weak, own) evaluation sets of `model`: its peer's own skills, and its own."""
    names = set_names(records)
    record = next(r for r in records if r["model"] == model)

    def sets(agent: str | None) -> list[str]:
        skills = record["own_skills"].get(agent or "", [])
        return [f"procedural/{s}" for s in skills if f"procedural/{s}" in names]

    return sets(record["peer"]), sets(model)


def _has(records: Sequence[Record], model: str, label: str) -> bool:
    return any(r["model"] == model and r["label"] == label for r in records)


def _find(rows: Sequence[Record], model: str, label: str) -> Record | None:
    return next((r for r in rows if r["model"] == model and r["label"] == label), None)


def assess(
    records: Sequence[Record], model: str, hypothesis: Hypothesis, **bootstrap: int
) -> dict[str, Any]:
    """One hypothesis for one model: its contrast, interval and verdict, or "not run"."""
    entry: dict[str, Any] = {
        "hypothesis": hypothesis.name,
        "claim": hypothesis.claim,
        "model": model,
        "labels": dict(hypothesis.labels),
        "margin": hypothesis.margin,
        "set_weights": None,
        "estimate": None,
        "verdict": "not run",
        "details": {},
    }
    missing = [label for label in hypothesis.labels if not _has(records, model, label)]
    if missing:
        entry["details"]["not_run"] = f"no finished cells of {', '.join(missing)}"
        return entry
    if hypothesis.skills:
        weak, own = skill_sets(records, model)
        if not weak or not own:
            entry["details"]["not_run"] = "the models' own skills are not known"
            return entry
        entry["set_weights"] = {
            **dict.fromkeys(weak, 1.0 / len(weak)),
            **dict.fromkeys(own, -1.0 / len(own)),
        }
    estimate = paired_contrast(records, model, hypothesis.labels, entry["set_weights"], **bootstrap)
    entry["estimate"] = asdict(estimate)
    entry["verdict"] = verdict(estimate, hypothesis.margin)
    return entry


def hypothesis_results(
    records: Sequence[Record],
    model: str,
    rows: Sequence[Record],
    compute: Sequence[Record],
    **bootstrap: int,
) -> list[dict[str, Any]]:
    """Every pre-registered hypothesis for `model`, with the numbers that go with it:
    H2 the rollout share, H6 the retention ratio (H6 is unresolved without H1's live
    gain), H7 the differences on weak and own skills alone and the rescue shares."""
    entries = {h.name: assess(records, model, h, **bootstrap) for h in HYPOTHESES}
    h1, h6, h7 = entries["H1"], entries["H6"], entries["H7"]
    graft_cost, grpo32_cost = _find(compute, model, GRAFT), _find(compute, model, GRPO32)
    if entries["H2"]["estimate"] and graft_cost and grpo32_cost:
        ours, theirs = graft_cost["rollouts_to_checkpoint"], grpo32_cost["rollouts_to_checkpoint"]
        entries["H2"]["details"]["rollout_share"] = ours / theirs if ours and theirs else None
    if h6["estimate"]:
        stored = _find(rows, model, STORED)["delta"]
        gain = h1["estimate"]["mean"]
        h6["details"]["retention"] = stored["mean"] / gain if gain else None
        if h1["verdict"] != "supported":
            h6["details"]["contrast_verdict"] = h6["verdict"]
            h6["verdict"] = NO_GAIN
    if h7["estimate"]:
        weak, own = skill_sets(records, model)
        for name, sets in (("weak", weak), ("own", own)):
            difference = paired_difference(records, model, GRAFT, GRPO8, sets=sets, **bootstrap)
            h7["details"][f"{name}_skills_delta"] = asdict(difference)
        for label in (GRAFT, GRPO8):
            h7["details"][f"rescue {label}"] = _find(rows, model, label)["rescue"]
    return list(entries.values())


def study_table(
    records: Sequence[Record], labels: Sequence[str], baseline: str, **bootstrap: int
) -> list[Record]:
    """`compare.report.table_rows` (per-set means, weak skills, rescue share) with each
    row's 95 % interval of the mean average pass@1 and its paired Δ vs `baseline`."""
    rows = table_rows(records, baseline, labels)
    for row in rows:
        model, label = row["model"], row["label"]
        row["interval"] = asdict(label_interval(records, model, label, **bootstrap))
        against = label != baseline and _has(records, model, baseline)
        delta = paired_difference(records, model, label, baseline, **bootstrap) if against else None
        row["delta"] = None if delta is None else asdict(delta)
    return rows
