"""What a tiny-pair build depends on: the members, the config, the problem pools.

Everything here enters the cache key (`cache_key`), so a change to any of it
builds a new pair instead of loading a stale one. Two pairs are built by the one
builder (`PAIRS`): the tiny pair the tests use (`TinyPairConfig()`), and the
testbed (`TESTBED`), warm-started to per-skill pass@1 targets so that exchange
has something to carry (issue 16).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass, field

from graft_env.data import Problem
from graft_env.data.procedural import LEVELS, SKILLS, generate
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


# Fields added after build version 3 enter the key only when they differ from their
# default, so the tiny pair the tests use keeps its key (and its cached build).
_KEYED_WHEN_SET = {"name": "tiny-pair", "targets": None}


def cache_key(config: TinyPairConfig, seed: int) -> str:
    """Hash of the build version, seed, config and a sample of the data generators."""
    sample = [generate(skill, i, seed=seed) for skill in SKILLS for i in range(3)]
    fingerprint = [(p.problem, p.extra["solution"]) for p in sample]
    fields = dataclasses.asdict(config)
    for name, default in _KEYED_WHEN_SET.items():
        if fields[name] == default:
            del fields[name]
    payload = json.dumps([BUILD_VERSION, seed, fields, fingerprint], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def training_problems(spec: TinyModelSpec, config: TinyPairConfig, seed: int) -> list[Problem]:
    """A deterministic pool: own skills round-robin, a `peer_skill_share` of the rest,
    levels drawn by `level_weights`, all from the procedural "sft" split, so RL on
    the "train" split and evaluation on "test" use questions the warm start never saw."""
    others = [s for s in SKILLS if s not in spec.skills]
    stream = random.Random(f"tiny-pair/{spec.name}/{seed}")
    problems = []
    for index in range(config.train_problems):
        pool = others if others and stream.random() < config.peer_skill_share else spec.skills
        level = stream.choices(LEVELS, weights=config.level_weights)[0]
        skill = pool[index % len(pool)]
        problems.append(generate(skill, index, seed=seed, split="sft", difficulty=level))
    return problems


def evaluation_problems(config: TinyPairConfig, seed: int) -> list[Problem]:
    """`eval_prompts_per_skill` test-split items of every skill, levels by `level_weights`."""
    stream = random.Random(f"tiny-pair/eval/{seed}")
    return [
        generate(
            skill,
            index,
            seed=seed,
            split="test",
            difficulty=stream.choices(LEVELS, weights=config.level_weights)[0],
        )
        for index in range(config.eval_prompts_per_skill)
        for skill in SKILLS
    ]


def base_skill_weights(spec: TinyModelSpec, config: TinyPairConfig) -> dict[str, float]:
    """Each skill's share of `spec`'s pool: its own skills share 1 - peer_skill_share,
    the others peer_skill_share, evenly."""
    others = [s for s in SKILLS if s not in spec.skills]
    own_share = 1.0 - (config.peer_skill_share if others else 0.0)
    weights = {s: own_share / len(spec.skills) for s in spec.skills}
    weights.update({s: config.peer_skill_share / len(others) for s in others})
    return weights


def skill_targets(spec: TinyModelSpec, targets: WarmStartTargets) -> dict[str, float]:
    """The pass@1 target of every skill for `spec`: `own` on its skills, `peer` on the rest."""
    return {s: targets.own if s in spec.skills else targets.peer for s in SKILLS}


def target_problems(config: TinyPairConfig, seed: int) -> list[Problem]:
    """The warm start's held-out check: `check_prompts` items per skill, levels by
    `level_weights`, from the procedural "train" split. Not "sft": at level 1 the
    multiplication and gcd item spaces are a few hundred questions, all of which
    the SFT pool holds, so an "sft" slice would measure recall. Indices start at
    10**6, far from the RL prompt stream's (0 to the dataset size); "test" stays
    untouched for the report."""
    if config.targets is None:
        raise ValueError(f"pair {config.name!r} has no warm-start targets")
    stream = random.Random(f"tiny-pair/targets/{seed}")
    return [
        generate(
            skill,
            TARGET_INDEX_OFFSET + index,
            seed=seed,
            split="train",
            difficulty=stream.choices(LEVELS, weights=config.level_weights)[0],
        )
        for index in range(config.targets.check_prompts)
        for skill in SKILLS
    ]


TARGET_INDEX_OFFSET = 10**6

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

PAIRS: dict[str, TinyPairConfig] = {"tiny-pair": TinyPairConfig(), "testbed-pair": TESTBED}


def pair_of(model: str) -> TinyPairConfig | None:
    """The built-in pair config with a member named `model`, else None."""
    for config in PAIRS.values():
        if model in (spec.name for spec in config.models):
            return config
    return None
