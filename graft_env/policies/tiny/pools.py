"""The problem pools of a tiny-pair build: what each model warm-starts on, what its
checks and the report sample, and each item's mix key and weight (`config.TinyPairConfig`
says how many of what).

Every pool is deterministic in (config, seed): the SFT pool from the procedural "sft"
split, the warm start's checks from "train" (from index `TARGET_INDEX_OFFSET`), the
report from "test"; a gap pair's family items are mixed and counted by their family.
"""

from __future__ import annotations

import random

from graft_env.data import Problem
from graft_env.data.procedural import LEVELS, SKILLS, generate
from graft_env.data.procedural.families import FAMILIES, family_of
from graft_env.policies.tiny.config import TinyModelSpec, TinyPairConfig, WarmStartTargets


def member_index(spec: TinyModelSpec, config: TinyPairConfig) -> int:
    return [m.name for m in config.models].index(spec.name)


def mix_key(problem: Problem, config: TinyPairConfig) -> str:
    """What an item is mixed, checked and reported as: its gap family if it has one,
    else its skill."""
    families = config.gap.families if config.gap is not None else ()
    return family_of(problem, families) or problem.extra["skill"]


def _draw(skill: str, index: int, config: TinyPairConfig, withheld: tuple[str, ...], **kw):
    """Item `index` of `skill`, or, when it is in a `withheld` family, the first item at
    index + k * train_problems (k = 1, 2, ...) that is not (same keyword arguments)."""
    for attempt in range(1000):
        problem = generate(skill, index + attempt * config.train_problems, **kw)
        if family_of(problem, withheld) is None:
            return problem
    raise RuntimeError(f"{skill}: 1000 draws all in the withheld families {list(withheld)}")


def training_problems(spec: TinyModelSpec, config: TinyPairConfig, seed: int) -> list[Problem]:
    """A deterministic pool: own skills round-robin, a `peer_skill_share` of the rest,
    levels drawn by `level_weights`, all from the procedural "sft" split, so RL on
    the "train" split and evaluation on "test" use questions the warm start never saw."""
    others = [s for s in SKILLS if s not in spec.skills]
    withheld = () if config.gap is None else config.gap.withheld(member_index(spec, config))
    stream = random.Random(f"tiny-pair/{spec.name}/{seed}")
    problems = []
    for index in range(config.train_problems):
        pool = others if others and stream.random() < config.peer_skill_share else spec.skills
        level = stream.choices(LEVELS, weights=config.level_weights)[0]
        skill = pool[index % len(pool)]
        kw = {"seed": seed, "split": "sft", "difficulty": level}
        problems.append(_draw(skill, index, config, withheld, **kw))
    return problems


def evaluation_problems(config: TinyPairConfig, seed: int) -> list[Problem]:
    """`eval_prompts_per_skill` test-split items of every skill (a gap pair: of every
    `mix_key`), levels by `level_weights`."""
    stream = random.Random(f"tiny-pair/eval/{seed}")
    if config.gap is not None:
        return keyed_problems(config, seed, "test", config.eval_prompts_per_skill, stream, 0)
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


def mix_weights(
    spec: TinyModelSpec, config: TinyPairConfig, problems: list[Problem]
) -> dict[str, float]:
    """`base_skill_weights`, and for a gap pair each skill's weight split between its
    items outside the families and each family by their counts in `problems` (the pool)."""
    base = base_skill_weights(spec, config)
    if config.gap is None:
        return base
    counts: dict[str, dict[str, int]] = {}
    for problem in problems:
        per_skill = counts.setdefault(problem.extra["skill"], {})
        key = mix_key(problem, config)
        per_skill[key] = per_skill.get(key, 0) + 1
    return {
        key: base[skill] * count / sum(keys.values())
        for skill, keys in counts.items()
        for key, count in keys.items()
    }


def key_targets(spec: TinyModelSpec, config: TinyPairConfig) -> dict[str, float]:
    """The pass@1 target of every trained mix key: `skill_targets`, and a gap pair's
    `GapTargets.goals`."""
    goals = skill_targets(spec, config.targets)
    if config.gap is not None:
        goals.update(config.gap.goals(member_index(spec, config)))
    return goals


def keyed_problems(
    config: TinyPairConfig, seed: int, split: str, count: int, stream: random.Random, start: int
) -> list[Problem]:
    """`count` items of every mix key of a gap pair: per skill, indices from `start` on
    (levels drawn from `stream` by `level_weights`), each kept while its key needs more."""
    problems = []
    for skill in SKILLS:
        families = [f for f in config.gap.families if FAMILIES[f].skill == skill]
        needed = {key: count for key in [skill, *families]}
        index = start
        while any(needed.values()):
            if index - start > 1000 * count:
                raise RuntimeError(f"{skill}: too few items of {sorted(needed)} in {split}")
            level = stream.choices(LEVELS, weights=config.level_weights)[0]
            problem = generate(skill, index, seed=seed, split=split, difficulty=level)
            key = mix_key(problem, config)
            if needed[key]:
                needed[key] -= 1
                problems.append(problem)
            index += 1
    return problems


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
    if config.gap is not None:
        count = config.targets.check_prompts
        return keyed_problems(config, seed, "train", count, stream, TARGET_INDEX_OFFSET)
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
