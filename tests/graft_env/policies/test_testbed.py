"""The testbed pair (issue 16): its preset, names, target-based warm start and funnel."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from benchmarks.perf import testbed_report
from graft_env.data.procedural import SKILLS
from graft_env.policies.tiny import build as tiny
from graft_env.policies.tiny.build import COMPLETE_FILE, build_tiny_pair
from graft_env.policies.tiny.config import (
    TESTBED,
    TinyPairConfig,
    WarmStartTargets,
    cache_key,
    pair_of,
)
from graft_env.policies.tiny.models import TinyShape
from graft_env.policies.tiny.pools import base_skill_weights, target_problems
from graft_env.policies.tiny.sft import SFTConfig, _weighted_batches
from graft_env.policies.zoo import model_path

SMALL = dict(
    shape=TinyShape(hidden=16, layers=1, heads=2, max_positions=256),
    sft=SFTConfig(steps=12, batch_size=4, bucket_batches=2, warmup_steps=1),
    train_problems=64,
    eval_prompts_per_skill=1,
    eval_n=2,
    eval_max_new_tokens=8,
)
QUICK_TESTBED = dataclasses.replace(
    TESTBED,
    **SMALL,
    targets=WarmStartTargets(
        check_every=4, first_check=4, check_prompts=1, check_n=2, check_max_new_tokens=8
    ),
)


def test_the_tiny_pair_keeps_its_key_and_the_testbed_has_its_own():
    # The key of the tiny pair the tests and the README use (build version 3): the
    # testbed's fields must not enter it at their defaults, or every cache rebuilds.
    assert cache_key(TinyPairConfig(), 0) == "7c72bbacf939a1cc"
    assert cache_key(TESTBED, 0) != cache_key(TinyPairConfig(), 0)
    other_targets = dataclasses.replace(TESTBED.targets, own=0.6)
    assert cache_key(dataclasses.replace(TESTBED, targets=other_targets), 0) != cache_key(
        TESTBED, 0
    )


def test_the_testbed_preset_validates():
    assert TESTBED.targets is not None and TESTBED.name == "testbed-pair"
    assert [m.name for m in TESTBED.models] == ["testbed-a", "testbed-b"]
    assert dataclasses.replace(TESTBED) == TESTBED  # __post_init__ accepts it
    weights = base_skill_weights(TESTBED.models[0], TESTBED)
    assert sum(weights.values()) == pytest.approx(1.0)
    assert weights["subtraction"] == pytest.approx(TESTBED.peer_skill_share / 3)
    with pytest.raises(ValueError, match=r"peer_skill_share > 0"):
        dataclasses.replace(TESTBED, peer_skill_share=0.0)
    with pytest.raises(ValueError, match=r"WarmStartTargets\.own"):
        WarmStartTargets(own=1.5)


def test_target_checks_are_held_out_from_sft_and_from_the_rl_stream():
    problems = target_problems(TESTBED, 0)
    assert len(problems) == TESTBED.targets.check_prompts * len(SKILLS)
    assert all("/train/" in p.id and int(p.id.rsplit("/", 1)[1]) >= 10**6 for p in problems)


def test_testbed_names_resolve_to_the_testbed_cache(tmp_path):
    assert pair_of("testbed-b") is TESTBED
    assert pair_of("tiny-a") == TinyPairConfig()
    assert pair_of("gpt2") is None
    built = tmp_path / f"testbed-pair-{cache_key(TESTBED, 0)}"
    built.mkdir()
    (built / COMPLETE_FILE).write_text("{}")  # a finished build: resolving must not rebuild
    assert model_path("testbed-a", cache_dir=tmp_path) == built / "testbed-a"


def test_weighted_batches_follow_the_current_weights():
    examples = [([1], [2] * (1 + i % 3)) for i in range(40)]
    skills = ["a" if i < 20 else "b" for i in range(40)]
    weights = {"a": 1.0, "b": 0.0}
    config = SFTConfig(batch_size=4, bucket_batches=2)
    batches = _weighted_batches(examples, skills, weights, config, torch.Generator())
    first_pool = [i for _ in range(2) for i in next(batches)]
    assert all(skills[i] == "a" for i in first_pool)
    weights.update(a=0.0, b=1.0)  # read when the next pool is drawn
    second_pool = [i for _ in range(2) for i in next(batches)]
    assert all(skills[i] == "b" for i in second_pool)


def _scripted_pass_at_1(values):
    """A stand-in for the check's sampling: pass@1 per skill from `values(call)`
    (a number for every skill, or a {skill: value} mapping)."""
    calls = []

    def measure(model, tokenizer, problems, n, sampling):
        calls.append(sampling.seed)
        value = values(len(calls))
        return {skill: value[skill] if isinstance(value, dict) else value for skill in SKILLS}

    return measure, calls


def _training(paths):
    return json.loads((next(iter(paths.values())).parent / COMPLETE_FILE).read_text())["training"]


def test_warm_start_stops_when_every_skill_is_at_target(tmp_path, monkeypatch):
    # Checks every 4 of at most 12 steps; the members train one after the other, so
    # testbed-a sees calls 1-2 (steps 4, 8), testbed-b call 3 (step 4).
    measure, calls = _scripted_pass_at_1(lambda call: 0.0 if call == 1 else 1.0)
    monkeypatch.setattr(tiny, "_skill_pass_at_1", measure)
    training = _training(
        build_tiny_pair(tmp_path, config=QUICK_TESTBED, workers=0, log=lambda _: None)
    )
    assert training["testbed-a"]["steps"] == 8 < QUICK_TESTBED.sft.steps
    assert [c["step"] for c in training["testbed-a"]["target_checks"]] == [4, 8]
    assert training["testbed-a"]["target_checks"][0]["reached"] == []
    assert training["testbed-b"]["steps"] == 4
    assert training["testbed-b"]["target_checks"][-1]["weights"] is None
    assert len(calls) == 3


def test_warm_start_runs_to_the_cap_and_sets_reached_skills_aside(tmp_path, monkeypatch):
    targets = dataclasses.replace(QUICK_TESTBED.targets, reached_weight=0.5)
    config = dataclasses.replace(QUICK_TESTBED, targets=targets)
    measure, _ = _scripted_pass_at_1(lambda call: 0.2)  # own target 0.3 missed, peer 0.1 met
    monkeypatch.setattr(tiny, "_skill_pass_at_1", measure)
    training = _training(build_tiny_pair(tmp_path, config=config, workers=0, log=lambda _: None))
    spec = config.models[0]
    member = training[spec.name]
    assert member["steps"] == config.sft.steps
    check = member["target_checks"][-1]
    assert check["reached"] == sorted(s for s in SKILLS if s not in spec.skills)
    base = base_skill_weights(spec, config)
    for skill, weight in check["weights"].items():
        factor = 0.5 if skill in check["reached"] else 1.0
        assert weight == pytest.approx(factor * base[skill])


def test_funnel_script_runs_one_graft_step_at_the_smallest_size(tmp_path, capsys):
    config = dataclasses.replace(TinyPairConfig(), **SMALL)
    paths = build_tiny_pair(tmp_path, config=config, workers=0, log=lambda _: None)
    out = tmp_path / "funnel.json"
    sizes = ["--prompts", "3", "--n", "2", "--max-new-tokens", "8"]
    result = testbed_report.main(["--models", *map(str, paths.values()), *sizes, "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert set(result["directions"]) == {"tiny-a->tiny-b", "tiny-b->tiny-a"}
    for direction in result["directions"].values():
        assert 0 <= direction["prompts_kept"] <= direction["gate_candidates"] <= 3
        assert direction["responses_transferred"] == 2 * direction["prompts_kept"]
    assert "peer share of update" in capsys.readouterr().out


def test_no_check_runs_before_first_check(tmp_path, monkeypatch):
    targets = dataclasses.replace(QUICK_TESTBED.targets, first_check=8)
    config = dataclasses.replace(QUICK_TESTBED, targets=targets)
    measure, calls = _scripted_pass_at_1(lambda call: 0.0)
    monkeypatch.setattr(tiny, "_skill_pass_at_1", measure)
    training = _training(build_tiny_pair(tmp_path, config=config, workers=0, log=lambda _: None))
    assert [c["step"] for c in training["testbed-a"]["target_checks"]] == [8]
    assert len(calls) == 2  # one check per member, at step 8 of 12


def test_the_stop_rule_is_on_the_mean_of_own_and_of_peer_skills(tmp_path, monkeypatch):
    # One own skill far below its target, the own mean above: the mix is at target.
    own = QUICK_TESTBED.models[0].skills
    lagging = {s: (0.0 if s == own[0] else 0.9) if s in own else 0.15 for s in SKILLS}
    measure, _ = _scripted_pass_at_1(lambda call: lagging)
    monkeypatch.setattr(tiny, "_skill_pass_at_1", measure)
    training = _training(
        build_tiny_pair(tmp_path, config=QUICK_TESTBED, workers=0, log=lambda _: None)
    )
    check = training["testbed-a"]["target_checks"][-1]
    assert training["testbed-a"]["steps"] == 4 and check["weights"] is None
    assert own[0] not in check["reached"]


@pytest.mark.slow
def test_the_testbed_build_is_in_the_exchange_regime(tmp_path):
    """The full testbed build (~4-6 min on 2 cores): both warm starts stop by their
    rule, each model is stronger on its own skills than on the peer's, and each
    solves >= 35 % of the other's all-fail prompts (measured: 40-48 %)."""
    paths = build_tiny_pair(tmp_path, config=TESTBED)
    root = next(iter(paths.values())).parent
    report = json.loads((root / tiny.REPORT_FILE).read_text())
    training = json.loads((root / COMPLETE_FILE).read_text())["training"]
    for spec in TESTBED.models:
        assert training[spec.name]["steps"] < TESTBED.sft.steps, spec.name
        model = report["models"][spec.name]
        assert model["own_skills_pass_at_1"] >= TESTBED.targets.own, (spec.name, model)
        assert 0.05 <= model["other_skills_pass_at_1"] <= model["own_skills_pass_at_1"] - 0.1
    for row in report["complementarity"].values():
        assert all(share is not None and share >= 0.35 for share in row.values())
