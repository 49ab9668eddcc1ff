"""The gap study's pre-registered design (docs/study/GAP-PREREGISTRATION.md, sections 1 and
4): its doses, exchange arms, the pair members' roles, the scopes a contrast is read in,
and section 4's contrasts (`contrast_specs`; H2 apart, `slope`)."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.study.report import GRAFT, GRPO8, GRPO32, NO_COMPAT, NO_FLOOR

DOSES = ("gap-d0", "gap-d5", "gap-d15", "gap-d30")
LOW, HIGH, STRONG, WEAK = "gap-d0", "gap-d30", "gap-strong", "gap-weak"
ARMS = (GRAFT, NO_FLOOR, NO_COMPAT)  # the exchange arms
ROLES = ("a", "b")
SCOPES = (*ROLES, "pooled")
PROBE_STEPS = 3  # the probe's steps (section 1), at seed 0


@dataclass(frozen=True)
class Contrast:
    """A pre-registered contrast: `terms` (label, pair, weight) of the scores of each pair's
    member of one role; > -margin (superiority at margin 0, non-inferiority above), or, for
    a null control, an interval that contains 0."""

    name: str
    hypothesis: str
    claim: str
    terms: tuple[tuple[str, str, float], ...]
    margin: float = 0.0
    null: bool = False


def _minus(arm: str, base: str, pair: str) -> tuple[tuple[str, str, float], ...]:
    return ((arm, pair, 1.0), (base, pair, -1.0))


def contrast_specs() -> list[Contrast]:
    """Section 4's contrasts, H2 apart (`slope_terms`); then arm - GRPO n=8 at every dose
    (the dose-response, "D"), of which gap-d0's are H1, H1f and H1w."""
    names = {GRAFT: "GRAFT", NO_FLOOR: "GRAFT w/o floor", NO_COMPAT: "GRAFT w/o compat."}
    specs = [
        Contrast("H1", "H1", f"{GRAFT} - {GRPO8} at {LOW} > 0", _minus(GRAFT, GRPO8, LOW)),
        Contrast("H1f", "H1f", f"{NO_FLOOR} - {GRPO8} at {LOW} > 0", _minus(NO_FLOOR, GRPO8, LOW)),
        Contrast(
            "H1w", "H1w", f"{NO_COMPAT} - {GRPO8} at {LOW} > 0", _minus(NO_COMPAT, GRPO8, LOW)
        ),
    ]
    for arm in ARMS:
        terms = (*_minus(arm, GRPO8, LOW), (arm, HIGH, -1.0), (GRPO8, HIGH, 1.0))
        claim = f"({arm} - {GRPO8}) at {LOW} minus at {HIGH} > 0"
        specs.append(Contrast(f"H3 {names[arm]}", "H3", claim, terms))
    specs += [
        Contrast("H4", "H4", f"{GRAFT} - {NO_FLOOR} at {LOW} > 0", _minus(GRAFT, NO_FLOOR, LOW)),
        Contrast(
            "H6", "H6", f"{NO_FLOOR} - {NO_COMPAT} at {LOW} > 0", _minus(NO_FLOOR, NO_COMPAT, LOW)
        ),
    ]
    for arm in (GRAFT, NO_COMPAT):
        for pair in (LOW, HIGH):
            claim = f"{arm} - {GRPO32} at {pair} > -1.0"
            terms = _minus(arm, GRPO32, pair)
            specs.append(Contrast(f"H5 {names[arm]} {pair}", "H5", claim, terms, margin=1.0))
    for name, pair in (("N1", STRONG), ("N2", WEAK)):
        claim = f"{NO_COMPAT} - {GRPO8} on {pair}: interval contains 0"
        specs.append(Contrast(name, name, claim, _minus(NO_COMPAT, GRPO8, pair), null=True))
    for pair in DOSES:
        for arm in ARMS:
            claim = f"{arm} - {GRPO8} at {pair} > 0"
            specs.append(Contrast(f"D {pair} {names[arm]}", "D", claim, _minus(arm, GRPO8, pair)))
    return specs
