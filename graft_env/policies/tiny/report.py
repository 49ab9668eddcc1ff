"""How complementary two policies are: per-skill pass@1, all-fail rates, and the
share of one model's all-fail prompts that the other solves.

This is the property GRAFT feeds on (GRAFT-SPEC §2): a receiver's all-fail prompt
is only useful when its peer has at least one success there. The paper reports
47.9 % / 18.7 % for SmolLM3 / Qwen3; the tiny pair aims for >= 40 % both ways.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from graft_env import data
from graft_env.policies.base import Policy, SamplingParams
from graft_env.rewards import status_counts, verify_batch


def _rewards(policy: Policy, problems: Sequence[data.Problem], sampling: SamplingParams, n: int):
    prompts = [policy.format_prompt(p.problem) for p in problems]
    groups = policy.generate(prompts, n, sampling)
    texts = [gen.text for group in groups for gen in group]
    golds = [p.answer for p in problems for _ in range(n)]
    verdicts = verify_batch(texts, golds)
    rewards = np.array([v.reward for v in verdicts]).reshape(len(problems), n)
    finished = [gen.finish_reason == "stop" for group in groups for gen in group]
    return rewards, status_counts(verdicts), float(np.mean(finished))


def complementarity_report(
    policies: Mapping[str, Policy],
    problems: Sequence[data.Problem],
    *,
    n: int = 8,
    seed: int = 0,
    max_new_tokens: int = 256,
    groups: Sequence[str] | None = None,
) -> dict:
    """Evaluate every policy on `problems` at temperature 1.0, top-p 1.0.

    Problems are grouped by `groups` (one name per problem: a gap pair's skills and
    item families), else by `extra["skill"]` when they have one (the procedural
    family), else all count as one group "all".
    Returns a JSON-ready dict: per model and skill, `pass_at_1` (mean reward) and
    `all_fail` (share of prompts with no success among n); verifier status counts;
    the share of generations that ended with EOS; and for every ordered pair
    (A, B), `complementarity[A][B]`: the share of A's all-fail prompts that B
    solves at least once (None when A has no all-fail prompt).
    """
    if len(policies) < 2:
        raise ValueError(f"need at least two policies to compare, got {list(policies)}")
    if not problems:
        raise ValueError("complementarity_report needs at least one problem")
    if groups is not None and len(groups) != len(problems):
        raise ValueError(f"groups names {len(groups)} groups for {len(problems)} problems")
    named = groups if groups is not None else [p.extra.get("skill", "all") for p in problems]
    skill_of = np.array(list(named))
    skills = list(dict.fromkeys(skill_of.tolist()))
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=seed)
    report: dict = {
        "n": n,
        "prompts": len(problems),
        "prompts_per_skill": {skill: int((skill_of == skill).sum()) for skill in skills},
        "seed": seed,
        "models": {},
    }
    successes = {}
    for name, policy in policies.items():
        rewards, statuses, stopped = _rewards(policy, problems, sampling, n)
        successes[name] = rewards.sum(axis=1)
        report["models"][name] = {
            "skills": {
                skill: {
                    "pass_at_1": float(rewards[skill_of == skill].mean()),
                    "all_fail": float((successes[name][skill_of == skill] == 0).mean()),
                }
                for skill in skills
            },
            "pass_at_1": float(rewards.mean()),
            "verifier_status": statuses,
            "stopped_share": stopped,
        }
    report["complementarity"] = {
        a: {
            b: (
                float((successes[b][successes[a] == 0] > 0).mean())
                if (successes[a] == 0).any()
                else None
            )
            for b in policies
            if b != a
        }
        for a in policies
    }
    return report


def add_skill_mix_summary(report: dict, own_skills: Mapping[str, Sequence[str]]) -> dict:
    """Add each model's mean pass@1 over its own skills and over all the others.

    These are the tiny pair's targets (own >= 40 %, others 2-15 %); with equally
    many prompts per skill the mean over skills is the pass@1 of the skill mix.
    """
    report["own_skills"] = {name: list(skills) for name, skills in own_skills.items()}
    for name, skills in own_skills.items():
        per_skill = report["models"][name]["skills"]
        own = [per_skill[s]["pass_at_1"] for s in skills]
        others = [v["pass_at_1"] for s, v in per_skill.items() if s not in skills]
        report["models"][name]["own_skills_pass_at_1"] = float(np.mean(own))
        report["models"][name]["other_skills_pass_at_1"] = (
            float(np.mean(others)) if others else None
        )
    return report


def format_report(report: dict) -> str:
    """A plain-text table: one row per skill, pass@1 / all-fail per model."""
    names = list(report["models"])
    skills = list(report["models"][names[0]]["skills"])
    header = f"{'skill':<16}" + "".join(f"{name + ' pass@1':>16}{'all-fail':>10}" for name in names)
    lines = [header, "-" * len(header)]
    for skill in skills:
        cells = "".join(
            f"{report['models'][name]['skills'][skill]['pass_at_1']:>16.1%}"
            f"{report['models'][name]['skills'][skill]['all_fail']:>10.1%}"
            for name in names
        )
        lines.append(f"{skill:<16}{cells}")
    if "own_skills" in report:
        lines.append("")
        for name in names:
            model = report["models"][name]
            others = model["other_skills_pass_at_1"]
            lines.append(
                f"{name}: pass@1 {model['own_skills_pass_at_1']:.1%} on its own skills "
                f"({', '.join(report['own_skills'][name])}), "
                + ("n/a" if others is None else f"{others:.1%}")
                + " on the others"
            )
    lines.append("")
    for source, row in report["complementarity"].items():
        for other, share in row.items():
            text = "n/a (no all-fail prompt)" if share is None else f"{share:.1%}"
            lines.append(
                f"{other} solves {text} of the prompts where {source} fails all {report['n']}"
            )
    return "\n".join(lines)
