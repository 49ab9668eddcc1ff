"""What a tiny-pair build depends on: the members and the config; the built-in pairs.

Everything here enters the cache key (`cache_key`), so a change to any of it
builds a new pair instead of loading a stale one. Two pairs are built by the one
builder (`PAIRS`): the tiny pair the tests use (`TinyPairConfig()`), the
testbed (`TESTBED`), warm-started to per-skill pass@1 targets so that exchange
has something to carry (issue 16), and the gap pairs (`GAP_PAIRS`, issue 29): the
testbed with each model kept from one sub-procedure its peer learns. The problem
pools drawn from a config are `pools`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

from graft_env.data.procedural import LEVELS, SKILLS, generate
from graft_env.data.procedural.families import FAMILIES, check_family, in_family
from graft_env.policies.tiny.models import TinyShape
from graft_env.policies.tiny.sft import SFTConfig
from graft_env.policies.tiny.tokenizer import CHATML_STYLE, PLAIN_STYLE, TokenizerSpec

BUILD_VERSION = 3  # bump when the build procedure changes what it produces


@dataclass(frozen=True)
class TinyModelSpec:
    """One member of the pair: its name, family, tokenizer and own skills."""

    name: str
    architecture: str
    tokenizer: TokenizerSpec
    skills: tuple[str, ...]


@dataclass(frozen=True)
class WarmStartTargets:
    """Warm-start each skill to a pass@1 target instead of for a fixed number of steps.

    A fixed step count lands wherever the float summation order of the machine takes
    it (the same tiny-pair key gave 36 % and 44 % own-skill pass@1 on two CPUs); a
    target is reached wherever the path goes (the models learn in a late, steep
    rise whose timing is what differs). Every `check_every` SFT steps each model
    samples `check_n` responses (temperature 1) to `check_prompts` held-out prompts
    per skill (`target_problems`). A skill at or above its target trains on
    `reached_weight` x its base share of the data (`base_skill_weights`) until a
    later check finds it below again. The warm start stops at the first check
    whose mean pass@1 over the model's own skills reaches `own` and over the
    others' reaches `peer`, else at `sft.steps` (the cap, over which the
    learning-rate schedule is laid out). Means, not every skill: the skills learn
    at very different speeds (level-1 subtraction reached 99 % while modular was
    at 5 %), so "every skill at target" stops at the cap, like a fixed step count.
    Checks start at step `first_check`: before it the models are still learning the
    solution format (pass@1 ~0 at every skill), and an untrained model's check,
    which samples to the length cap, costs most.

    own / peer: the target on the model's own skills / on the other model's.
    reached_weight: not 0, because these models forget fast: with no data, a
        reached skill fell from 65 % to 39 % pass@1 in 250 steps, then rose to 80 %
        once its data was back (testbed-a, addition).
    """

    own: float = 0.3
    peer: float = 0.1
    check_every: int = 250
    first_check: int = 1000
    check_prompts: int = 20
    check_n: int = 4
    check_max_new_tokens: int = 128
    reached_weight: float = 0.25

    def __post_init__(self) -> None:
        for name in ("own", "peer"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"WarmStartTargets.{name} must be in (0, 1], got {value}")
        for name in (
            "check_every",
            "first_check",
            "check_prompts",
            "check_n",
            "check_max_new_tokens",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"WarmStartTargets.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.reached_weight <= 1.0:
            raise ValueError(
                f"WarmStartTargets.reached_weight must be in [0, 1], got {self.reached_weight}"
            )


@dataclass(frozen=True)
class GapTargets:
    """The gap pair (issue 29): each model kept from one sub-procedure the other learns.

    families[i] is model i's gap: an item family (`procedural.families`) of a skill the
    other model owns. Model i still learns that skill's other items (the answer format),
    and the other model is warm-started to `peer` pass@1 on the family.
    dose: model i's pass@1 target on its own gap family (the study's dose). 0: it never
        sees an item of the family; above 0: the family's items stay in its pool, and
        once a check finds the target reached their weight is 0 until a check finds it
        below again (so the warm start holds near the dose instead of passing it).
    peer: the target of each model on the other's gap family (40-60 %: mixed groups,
        not all-pass). 0: both models are kept from both families (the "both weak"
        control).
    """

    families: tuple[str, ...]
    dose: float = 0.0
    peer: float = 0.5

    def __post_init__(self) -> None:
        for name in self.families:
            check_family(name)
        if len(set(self.families)) != len(self.families):
            raise ValueError(f"GapTargets.families must be distinct, got {list(self.families)}")
        if not 0.0 <= self.dose < 1.0:
            raise ValueError(f"GapTargets.dose must be in [0, 1), got {self.dose}")
        if not 0.0 <= self.peer <= 1.0:
            raise ValueError(f"GapTargets.peer must be in [0, 1], got {self.peer}")

    def withheld(self, member: int) -> tuple[str, ...]:
        """The families model `member` never trains on (see `dose` and `peer`)."""
        own = (self.families[member],) if self.dose == 0 else ()
        others = tuple(f for i, f in enumerate(self.families) if i != member)
        return own + (others if self.peer == 0 else ())

    def goals(self, member: int) -> dict[str, float]:
        """Model `member`'s pass@1 target per family it trains on."""
        goals = {f: self.peer for i, f in enumerate(self.families) if i != member}
        goals[self.families[member]] = self.dose
        return {f: g for f, g in goals.items() if f not in self.withheld(member)}


@dataclass(frozen=True)
class TinyPairConfig:
    """Everything the build depends on besides the seed (all of it enters the cache key).

    train_problems: SFT pool size per model (the SFT cycles over it).
    level_weights: sampling weights of difficulty levels 1..5, for the SFT pool and
        the report's test prompts alike. Levels 4-5 need multi-digit sums and
        divisions in one step, which ~1M-parameter models do not learn in minutes,
        so the pair's home distribution is the low levels; RL runs with the tiny
        pair should draw prompts from the same levels.
    peer_skill_share: share of a model's pool drawn from the other model's skills:
        the overlap knob (0: each model knows only its own skills; more: each is
        partly competent on the peer's, and the peer's text is closer to its own,
        so more of it passes the compatibility floor).
    eval_*: the complementarity report: test prompts per skill, samples per prompt,
        and the response length cap.
    name: the pair's cache directory prefix.
    targets: warm-start to per-skill pass@1 targets (`WarmStartTargets`), with
        `sft.steps` as the cap; None: train for exactly `sft.steps`.
    gap: the gap pair's families and targets (`GapTargets`; needs `targets`): the
        families' items are mixed, checked and reported apart from the rest of their
        skill (`mix_key`). None: no families.
    """

    models: tuple[TinyModelSpec, ...] = (
        TinyModelSpec(
            "tiny-a", "gpt_neox", PLAIN_STYLE, ("addition", "multiplication", "linear_equation")
        ),
        TinyModelSpec("tiny-b", "llama", CHATML_STYLE, ("subtraction", "modular", "gcd")),
    )
    shape: TinyShape = field(default_factory=TinyShape)
    sft: SFTConfig = field(
        default_factory=lambda: SFTConfig(steps=3000, batch_size=16, lr=2e-3, warmup_steps=100)
    )
    train_problems: int = 24000
    level_weights: tuple[float, ...] = (1, 0, 0, 0, 0)
    peer_skill_share: float = 0.05
    eval_prompts_per_skill: int = 48
    eval_n: int = 8
    eval_max_new_tokens: int = 256
    name: str = "tiny-pair"
    targets: WarmStartTargets | None = None
    gap: GapTargets | None = None

    def __post_init__(self) -> None:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names) or len(names) < 2:
            raise ValueError(f"TinyPairConfig.models needs >= 2 distinct names, got {names}")
        unknown = sorted({s for m in self.models for s in m.skills} - set(SKILLS))
        if unknown:
            raise ValueError(f"TinyPairConfig: unknown skills {unknown}; valid: {list(SKILLS)}")
        weights = self.level_weights
        if len(weights) != len(LEVELS) or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(
                f"level_weights needs {len(LEVELS)} weights >= 0, not all 0; got {weights}"
            )
        if not 0.0 <= self.peer_skill_share < 1.0:
            raise ValueError(f"peer_skill_share must be in [0, 1), got {self.peer_skill_share}")
        if self.targets is not None and self.peer_skill_share == 0:
            raise ValueError(
                "targets need peer_skill_share > 0: peer skills have no data to reach theirs"
            )
        if self.gap is not None:
            self._check_gap(self.gap)

    def _check_gap(self, gap: GapTargets) -> None:
        if self.targets is None:
            raise ValueError(f"TinyPairConfig {self.name!r}: gap needs warm-start targets")
        if len(gap.families) != len(self.models):
            raise ValueError(
                f"TinyPairConfig {self.name!r}: gap.families needs one family per model "
                f"({len(self.models)}), got {list(gap.families)}"
            )
        for index, family in enumerate(gap.families):
            owners = [m.name for m in self.models if FAMILIES[family].skill in m.skills]
            if owners and self.models[index].name in owners:
                raise ValueError(
                    f"TinyPairConfig {self.name!r}: gap.families[{index}] = {family!r} is a "
                    f"family of {self.models[index].name}'s own skill; a gap is a peer skill"
                )
            if not owners:
                raise ValueError(
                    f"TinyPairConfig {self.name!r}: gap.families[{index}] = {family!r}: no "
                    f"model owns its skill {FAMILIES[family].skill!r} to learn it"
                )


# Fields added after build version 3 enter the key only when they differ from their
# default, so the tiny pair the tests use keeps its key (and its cached build).
_KEYED_WHEN_SET = {"name": "tiny-pair", "targets": None, "gap": None}
FAMILY_FINGERPRINT_ITEMS = 64  # items per gap family whose membership enters the key


def cache_key(config: TinyPairConfig, seed: int) -> str:
    """Hash of the build version, seed, config and a sample of the data generators (and,
    for a gap pair, of which sampled items its family filters select)."""
    sample = [generate(skill, i, seed=seed) for skill in SKILLS for i in range(3)]
    fingerprint = [(p.problem, p.extra["solution"]) for p in sample]
    fields = dataclasses.asdict(config)
    for name, default in _KEYED_WHEN_SET.items():
        if fields[name] == default:
            del fields[name]
    if config.gap is not None:
        fingerprint.append(_family_fingerprint(config.gap.families, seed))
    payload = json.dumps([BUILD_VERSION, seed, fields, fingerprint], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _family_fingerprint(families: tuple[str, ...], seed: int) -> list[list[bool]]:
    """Each family's verdict on the first items of its skill at every level: a filter
    that selects other items makes another key."""
    return [
        [
            in_family(name, generate(FAMILIES[name].skill, i, seed=seed, difficulty=level))
            for level in LEVELS
            for i in range(FAMILY_FINGERPRINT_ITEMS // len(LEVELS))
        ]
        for name in families
    ]


# The testbed (issue 16): the paper's regime at laptop scale. Each model partly
# competent on every skill and stronger on its own. The overlap knob is
# peer_skill_share: a quarter of each model's data is the peer's skills (tiny pair:
# 5 %), so the peer's worked solutions are text the receiver knows and 54-76 % of
# transferred responses pass the compatibility floor (tiny pair: 22-28 %). The
# targets, not the step count, decide where the warm start ends: builds on AVX-512
# and AVX2 kernels (different weights, stops at 3750 / 3250 steps) agree within 1-4
# points per skill. The tiny pair's shape and optimiser; 3.5-5.5 min on 2 cores.
TESTBED = TinyPairConfig(
    models=(
        TinyModelSpec(
            "testbed-a", "gpt_neox", PLAIN_STYLE, ("addition", "multiplication", "linear_equation")
        ),
        TinyModelSpec("testbed-b", "llama", CHATML_STYLE, ("subtraction", "modular", "gcd")),
    ),
    sft=SFTConfig(steps=4000, batch_size=16, lr=2e-3, warmup_steps=100),
    peer_skill_share=0.25,
    name="testbed-pair",
    targets=WarmStartTargets(),
)


def gap_pair(name: str, dose: float, peer: float = 0.5) -> TinyPairConfig:
    """The gap pair (issue 29): the testbed, with gap-a kept from subtraction with a
    borrow (gap-b's skill) and gap-b from addition with a carry (gap-a's), each warm-started
    to `dose` pass@1 on its own gap and `peer` on the other's (`GapTargets`)."""
    return dataclasses.replace(
        TESTBED,
        models=(
            dataclasses.replace(TESTBED.models[0], name=f"{name}-a"),
            dataclasses.replace(TESTBED.models[1], name=f"{name}-b"),
        ),
        name=name,
        gap=GapTargets(families=("borrow", "carry"), dose=dose, peer=peer),
    )


# The gap study's builds (docs/study/GAP-PREREGISTRATION.md): four doses, and the two null
# controls: a peer at ~90 % on the family (all-pass groups, no candidates) and both weak.
GAP_PAIRS = {
    "gap-d0": gap_pair("gap-d0", 0.0),
    "gap-d5": gap_pair("gap-d5", 0.05),
    "gap-d15": gap_pair("gap-d15", 0.15),
    "gap-d30": gap_pair("gap-d30", 0.30),
    "gap-strong": gap_pair("gap-strong", 0.0, peer=0.9),
    "gap-weak": gap_pair("gap-weak", 0.0, peer=0.0),
}

PAIRS: dict[str, TinyPairConfig] = {
    "tiny-pair": TinyPairConfig(),
    "testbed-pair": TESTBED,
    **GAP_PAIRS,
}


def pair_of(model: str) -> TinyPairConfig | None:
    """The built-in pair config with a member named `model`, else None."""
    for config in PAIRS.values():
        if model in (spec.name for spec in config.models):
            return config
    return None
