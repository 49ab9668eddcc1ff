"""What an exchange did, per direction, so the loop can log it (SPEC §2-§4).

A strategy fills one `DirectionStats` per (source, receiver) pair it considered and
returns the whole `ExchangeStats` with its transfers (`ExchangeResult.stats`).
`summary()` flattens it into the `{"name": float}` form that loggers take.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class DirectionStats:
    """One source -> receiver direction of one step's exchange.

    `candidates` counts the prompts this direction proposed before balancing: with
    two agents |C_{S->R}| (Eq.4, or k_S >= 1 under candidates='any_success'); with
    more (the §8 extension) only the prompts for which S is the receiver's best
    eligible peer, i.e. what balancing actually weighed. `gate_candidates` is the
    full |C_{S->R}| under the same rule for strategies that use the gate (None
    otherwise: SGT and HACPO have their own `candidates`).
    `selected_prompts` are the prompts actually transferred; `scores` (s) and
    `weights` (w) list every transferred response (scores only where the strategy
    computes s), removed ones included (w = 0), so removals can be audited:
    `removed_by_weight` are w = 0 from the floor or random admission,
    `removed_failures` failed responses dropped by success-only.
    """

    source: str
    receiver: str
    candidates: int = 0
    gate_candidates: int | None = None
    selected_prompts: list[int] = field(default_factory=list)
    transferred: int = 0
    admitted: int = 0
    removed_by_weight: int = 0
    removed_failures: int = 0
    scores: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)

    def record(self, scores: np.ndarray | None, weights: np.ndarray, failures_removed: int) -> None:
        """Add one transferred group's final weights and, if the strategy computes s, scores."""
        self.transferred += int(weights.size)
        self.admitted += int(np.count_nonzero(weights > 0))
        self.removed_failures += failures_removed
        self.removed_by_weight = self.transferred - self.admitted - self.removed_failures
        if scores is not None:
            self.scores.extend(float(s) for s in scores)
        self.weights.extend(float(w) for w in weights)


@dataclass
class ExchangeStats:
    """Everything one call of a strategy did, keyed by (source, receiver)."""

    strategy: str
    directions: dict[tuple[str, str], DirectionStats] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)

    def direction(self, source: str, receiver: str) -> DirectionStats:
        """The stats of one direction, created empty on first use."""
        key = (source, receiver)
        if key not in self.directions:
            self.directions[key] = DirectionStats(source=source, receiver=receiver)
        return self.directions[key]

    def count(
        self, name: str, value: float = 1.0, source: str | None = None, receiver: str | None = None
    ) -> None:
        """Add `value` to a strategy's own counter `name` (a metric in `summary()`, summed over
        the calls of one step): `<strategy>/<name>`, or with a direction
        `exchange/<source>-><receiver>/<strategy>/<name>`. Keys are built here, never by hand."""
        if not name or name.startswith("/") or name.endswith("/"):
            raise ValueError(f"counter name {name!r}: need a non-empty name like 'kept/top'")
        if (source is None) != (receiver is None):
            raise ValueError(f"counter {name!r}: give both source and receiver, or neither")
        key = f"{self.strategy}/{name}"
        if source is not None:
            key = f"exchange/{source}->{receiver}/{key}"
        self.extra[key] = self.extra.get(key, 0.0) + float(value)

    def summary(self) -> dict[str, float]:
        """Flat metrics: counts per direction, mean s and w of admitted responses, extras."""
        metrics: dict[str, float] = dict(self.extra)
        for (source, receiver), d in self.directions.items():
            prefix = f"exchange/{source}->{receiver}"
            metrics[f"{prefix}/candidates"] = float(d.candidates)
            if d.gate_candidates is not None:
                metrics[f"{prefix}/gate_candidates"] = float(d.gate_candidates)
            metrics[f"{prefix}/prompts"] = float(len(d.selected_prompts))
            metrics[f"{prefix}/transferred"] = float(d.transferred)
            metrics[f"{prefix}/admitted"] = float(d.admitted)
            metrics[f"{prefix}/removed_by_weight"] = float(d.removed_by_weight)
            metrics[f"{prefix}/removed_failures"] = float(d.removed_failures)
            if d.scores:
                metrics[f"{prefix}/mean_s"] = float(np.mean(d.scores))
            if d.admitted:
                metrics[f"{prefix}/mean_w_admitted"] = float(
                    np.mean([w for w in d.weights if w > 0])
                )
        return metrics


def distribution(prefix: str, values: Iterable[float]) -> dict[str, float]:
    """Count, mean and quantiles of a list of values (empty list: count 0 only)."""
    array = np.asarray(list(values), dtype=np.float64)
    if array.size == 0:
        return {f"{prefix}/count": 0.0}
    q10, q50, q90 = np.quantile(array, [0.1, 0.5, 0.9])
    return {
        f"{prefix}/count": float(array.size),
        f"{prefix}/mean": float(array.mean()),
        f"{prefix}/min": float(array.min()),
        f"{prefix}/p10": float(q10),
        f"{prefix}/p50": float(q50),
        f"{prefix}/p90": float(q90),
        f"{prefix}/max": float(array.max()),
    }
