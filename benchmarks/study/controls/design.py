"""The peer-control study's design as registered (docs/study/GAP-CONTROLS-PREREGISTRATION.md):
its two builds with their grids and seeds, the four arms, the contrasts, alpha, and the files
whose last commit must precede every cell."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GRPO, GRAFT, TWIN, SHUFFLED = "GRPO n=8", "GRAFT", "twin peer", "shuffled-reward peer"
ARMS = (GRPO, GRAFT, TWIN, SHUFFLED)
EXCHANGE_ARMS = (GRAFT, TWIN, SHUFFLED)
ALPHA = 0.05  # family-wise, Holm over the primary contrasts
SCOPES = ("pooled", "a", "b")
BOOTSTRAP = {"resamples": 10_000, "seed": 0}


@dataclass(frozen=True)
class Build:
    """One gap-d30 build: its grid (which sets the build seed), output folder and seeds."""

    name: str  # the output folder under --out: runs/gap-peer-controls/<name>
    grid: str
    build_seed: int
    seeds: tuple[int, ...]


BUILDS = (
    Build("build0", "configs/grids/gap-peer-controls.yaml", 0, tuple(range(10, 22))),
    Build("build1", "configs/grids/gap-peer-controls-b1.yaml", 1, tuple(range(22, 34))),
)


@dataclass(frozen=True)
class Contrast:
    """arm - baseline, per seed: pooled (the mean over models a and b) or per model."""

    name: str
    arm: str
    baseline: str
    primary: bool
    prediction: str
    margin: float = 0.0  # non-inferiority: the threshold is -margin (0: superiority)


CONTRASTS = (
    Contrast("C1", GRAFT, GRPO, True, "> 0: the gap-d30 gain replicates"),
    Contrast("C2", GRAFT, TWIN, True, "> 0 if the peer's procedure matters beyond more groups"),
    Contrast("C3", GRAFT, SHUFFLED, True, "> 0 if the gain needs which peer traces are right"),
    Contrast("S1", TWIN, GRPO, False, "what the twin's extra informative groups do"),
    Contrast("S2", SHUFFLED, GRPO, False, "what wrong-labelled peer traces do (< 0: they hurt)"),
)

DESIGN_FILES = (
    "docs/study/GAP-CONTROLS-PREREGISTRATION.md",
    "configs/grids/gap-peer-controls.yaml",
    "configs/grids/gap-peer-controls-b1.yaml",
    "configs/grids/gap.yaml",
    "configs/gap_pair_graft.yaml",
    "algorithms/exchange/controls.py",
    "algorithms/exchange/resample.py",
    "benchmarks/study/multiplicity.py",
    "benchmarks/study/controls",
    "benchmarks/study/controls_report.py",
)
"""The study's design: the registration commit is the last commit that touched any of these."""


def build_of(seed: int, builds: Sequence[Build] = BUILDS) -> str:
    """The build a training seed belongs to."""
    for build in builds:
        if seed in build.seeds:
            return build.name
    raise ValueError(f"seed {seed} is in no build of the design ({[b.seeds for b in builds]})")
