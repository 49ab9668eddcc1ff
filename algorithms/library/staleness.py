"""How old the library groups a receiver used are, and how much of them it admitted.

A stored group keeps its behaviour log-probs however long ago it was sampled, so the
compatibility score stays defined for old groups; what changes with age is how well
the receiver's current policy still matches them, which shows as the admitted share
(responses with w > 0 / responses transferred). Logged per step by age bucket, both in
steps and in hours of wall-clock time since the group was written, so a user sees when a
library goes stale.

A step age is counted within the group's source run, whose steps are the only ones its
step is comparable with (a receiver's step counts another run's updates): the source's
last step in the library minus the group's step, i.e. how many updates the source policy
made after sampling it (0: from its last stored step). Groups without a step (imports
without a step column) have none and are left out of the step buckets.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from algorithms.exchange.stats import distribution

STEP_EDGES = (1, 10, 100)
HOUR_EDGES = (1, 24, 168)  # an hour, a day, a week


def bucket_labels(edges: Sequence[float]) -> list[str]:
    """Names of the buckets below, between and above `edges`: lt1, 1to10, ..., ge100."""
    inner = [f"{lo:g}to{hi:g}" for lo, hi in pairwise(edges)]
    return [f"lt{edges[0]:g}", *inner, f"ge{edges[-1]:g}"]


def admitted_by_age(
    prefix: str,
    ages: Sequence[float],
    weights: Sequence[np.ndarray],
    edges: Sequence[float],
) -> dict[str, float]:
    """Per age bucket (`bucket_labels(edges)`, a bucket holding ages in [lo, hi)): the
    responses transferred, those admitted (w > 0) and their share, for the groups whose
    ages and final weights are given; buckets without a group are left out."""
    labels = bucket_labels(edges)
    out: dict[str, float] = {}
    buckets = np.searchsorted(np.asarray(edges, dtype=np.float64), ages, side="right")
    for bucket in sorted(set(buckets.tolist())):
        members = [w for w, b in zip(weights, buckets, strict=True) if b == bucket]
        transferred = sum(w.size for w in members)
        admitted = sum(int(np.count_nonzero(w > 0)) for w in members)
        name = f"{prefix}_{labels[bucket]}"
        out[f"{name}/transferred"] = float(transferred)
        out[f"{name}/admitted"] = float(admitted)
        out[f"{name}/admitted_share"] = admitted / transferred
    return out


def staleness_metrics(
    now: float,
    step_ages: Sequence[int | None],
    generated_at: Sequence[float],
    weights: Sequence[np.ndarray],
) -> dict[str, float]:
    """The age of each group used this step (in its source run's steps, None where
    unknown, and since the time it was written) and the admitted share by age, as
    `library/...` metrics."""
    known = [j for j, age in enumerate(step_ages) if age is not None]
    age_steps = [float(step_ages[j]) for j in known]
    age_hours = [(now - t) / 3600.0 for t in generated_at]
    return {
        **distribution("library/age_steps", age_steps),
        **distribution("library/age_hours", age_hours),
        **admitted_by_age("library/age_steps", age_steps, [weights[j] for j in known], STEP_EDGES),
        **admitted_by_age("library/age_hours", age_hours, weights, HOUR_EDGES),
    }
