"""The result type of one verification, and counting results by status.

Every verification ends in exactly one :data:`STATUSES` value so that callers can count
why rewards were zero (GRAFT-SPEC §1: a verifier timeout or parse failure scores 0 *and is
counted*) instead of silently folding failures into wrong answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

STATUSES: tuple[str, ...] = ("ok", "no_answer", "parse_error", "timeout", "error")
"""Possible outcomes of one verification.

- ``ok``: verification completed; ``reward`` is the verdict (1.0 correct, 0.0 wrong).
- ``no_answer``: the response has no (balanced) ``\\boxed{...}``.
- ``parse_error``: the boxed answer could not be parsed by math-verify.
- ``timeout``: the per-item time limit was exceeded.
- ``error``: anything else went wrong (unparsable gold, worker crash, unexpected exception).
"""


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one response against one gold answer.

    Attributes:
        reward: 1.0 if the answer was verified correct, else 0.0; never anything else.
        status: one of :data:`STATUSES`; ``"ok"`` means verification completed.
        extracted: content of the response's last ``\\boxed{}``, or None when there is none
            (or when it is unknown because the worker died before reporting it).
    """

    reward: float
    status: str
    extracted: str | None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Verdict.status must be one of {STATUSES}, got {self.status!r}")
        if not isinstance(self.reward, float) or self.reward not in (0.0, 1.0):
            raise ValueError(f"Verdict.reward must be exactly 0.0 or 1.0, got {self.reward!r}")
        if self.reward == 1.0 and self.status != "ok":
            raise ValueError(f"Verdict.reward 1.0 requires status 'ok', got {self.status!r}")


def status_counts(verdicts: Iterable[Verdict]) -> dict[str, int]:
    """Count verdicts per status; every status in :data:`STATUSES` is a key (0 if absent)."""
    counts = dict.fromkeys(STATUSES, 0)
    for verdict in verdicts:
        counts[verdict.status] += 1
    return counts
