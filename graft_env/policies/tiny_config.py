"""What the tiny-pair build depends on: the members, the config, the problem pools.

Everything here enters the cache key (`cache_key`), so a change to any of it
builds a new pair instead of loading a stale one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass, field

from graft_env.data import Problem
from graft_env.data.procedural import LEVELS, SKILLS, generate
from graft_env.policies.sft import SFTConfig
from graft_env.policies.tiny_models import TinyShape
from graft_env.policies.tiny_tokenizer import CHATML_STYLE, PLAIN_STYLE, TokenizerSpec

BUILD_VERSION = 3  # bump when the build procedure changes what it produces


@dataclass(frozen=True)
class TinyModelSpec:
    """One member of the pair: its name, family, tokenizer and own skills."""

    name: str
    architecture: str
    tokenizer: TokenizerSpec
    skills: tuple[str, ...]


@dataclass(frozen=True)
class TinyPairConfig:
    """Everything the build depends on besides the seed (all of it enters the cache key).

    train_problems: SFT pool size per model (the SFT cycles over it).
    level_weights: sampling weights of difficulty levels 1..5, for the SFT pool and
        the report's test prompts alike. Levels 4-5 need multi-digit sums and
        divisions in one step, which ~1M-parameter models do not learn in minutes,
        so the pair's home distribution is the low levels; RL runs with the tiny
        pair should draw prompts from the same levels.
    peer_skill_share: share of a model's pool drawn from the other model's skills.
    eval_*: the complementarity report: test prompts per skill, samples per prompt,
        and the response length cap.
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


def cache_key(config: TinyPairConfig, seed: int) -> str:
    """Hash of the build version, seed, config and a sample of the data generators."""
    sample = [generate(skill, i, seed=seed) for skill in SKILLS for i in range(3)]
    fingerprint = [(p.problem, p.extra["solution"]) for p in sample]
    payload = json.dumps(
        [BUILD_VERSION, seed, dataclasses.asdict(config), fingerprint], sort_keys=True
    )
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
