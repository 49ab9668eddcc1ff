"""The gap pair (issue 29): configs, what each model's pool withholds, the cache key, and a
small build's record (weights digests, per-family report). No trained outcome is pinned."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
import torch

from graft_env.data.procedural import families as family_module
from graft_env.data.procedural.families import in_family
from graft_env.policies.tiny.build import COMPLETE_FILE, REPORT_FILE, build_tiny_pair
from graft_env.policies.tiny.config import (
    GAP_PAIRS,
    PAIRS,
    TESTBED,
    GapTargets,
    TinyPairConfig,
    WarmStartTargets,
    cache_key,
    gap_pair,
    pair_of,
)
from graft_env.policies.tiny.models import TinyShape
from graft_env.policies.tiny.pools import (
    evaluation_problems,
    key_targets,
    mix_key,
    mix_weights,
    target_problems,
    training_problems,
)
from graft_env.policies.tiny.sft import SFTConfig

D0 = GAP_PAIRS["gap-d0"]


def test_the_tiny_pair_and_testbed_keep_their_keys():
    # the builds before the gap pair existed: their caches must stay valid
    assert cache_key(TinyPairConfig(), 0) == "7c72bbacf939a1cc"
    assert cache_key(TESTBED, 0) == "8d36af34b85cd42c"
    assert cache_key(TESTBED, 1) == "2d779016b5359a26"


def test_dose_peer_families_and_filters_enter_the_key(monkeypatch):
    keys = {cache_key(config, 0) for config in GAP_PAIRS.values()}
    assert len(keys) == len(GAP_PAIRS)
    same = dataclasses.replace(D0, gap=dataclasses.replace(D0.gap, dose=0.0))
    assert cache_key(same, 0) == cache_key(D0, 0)
    before = cache_key(D0, 0)
    changed = dataclasses.replace(family_module.FAMILIES["carry"], test=lambda a, b: a > b)
    monkeypatch.setitem(family_module.FAMILIES, "carry", changed)
    assert cache_key(D0, 0) != before  # a filter selecting other items is another build


def test_gap_pairs_are_named_built_in_pairs():
    for name, config in GAP_PAIRS.items():
        assert PAIRS[name] is config and config.name == name
        assert [m.name for m in config.models] == [f"{name}-a", f"{name}-b"]
        assert pair_of(f"{name}-b") is config
    assert [GAP_PAIRS[f"gap-d{d}"].gap.dose for d in (0, 5, 15, 30)] == [0, 0.05, 0.15, 0.3]


def test_bad_gap_configs_fail_with_the_field_named():
    with pytest.raises(ValueError, match="unknown item family 'borow'"):
        GapTargets(families=("borow", "carry"))
    with pytest.raises(ValueError, match=r"GapTargets\.dose must be in \[0, 1\)"):
        GapTargets(families=("borrow", "carry"), dose=1.0)
    with pytest.raises(ValueError, match=r"GapTargets\.families must be distinct"):
        GapTargets(families=("borrow", "borrow"))
    with pytest.raises(ValueError, match=r"gap.families\[0\] = 'carry' is a family of"):
        dataclasses.replace(D0, gap=GapTargets(families=("carry", "borrow")))
    with pytest.raises(ValueError, match="one family per model"):
        dataclasses.replace(D0, gap=GapTargets(families=("borrow",)))
    with pytest.raises(ValueError, match="gap needs warm-start targets"):
        dataclasses.replace(D0, targets=None)


def test_withheld_families_and_goals():
    assert D0.gap.withheld(0) == ("borrow",) and D0.gap.withheld(1) == ("carry",)
    assert D0.gap.goals(0) == {"carry": 0.5}
    dosed = GAP_PAIRS["gap-d15"].gap
    assert dosed.withheld(0) == () and dosed.goals(0) == {"carry": 0.5, "borrow": 0.15}
    weak = GAP_PAIRS["gap-weak"].gap
    assert set(weak.withheld(0)) == set(weak.withheld(1)) == {"borrow", "carry"}
    assert weak.goals(0) == {}


def _pool(config: TinyPairConfig, member: int) -> list:
    small = dataclasses.replace(config, train_problems=600)
    return training_problems(small.models[member], small, 0)


def test_a_model_never_sees_its_withheld_family():
    a, b = _pool(D0, 0), _pool(D0, 1)
    assert not any(in_family("borrow", p) for p in a)
    assert any(in_family("borrow", p) for p in b)
    assert not any(in_family("carry", p) for p in b)
    assert any(p.extra["skill"] == "subtraction" for p in a)  # the format, without borrows
    dosed = _pool(GAP_PAIRS["gap-d5"], 0)
    assert any(in_family("borrow", p) for p in dosed)
    weak = _pool(GAP_PAIRS["gap-weak"], 0) + _pool(GAP_PAIRS["gap-weak"], 1)
    assert not any(in_family(f, p) for p in weak for f in ("borrow", "carry"))


def test_the_mix_splits_a_skill_between_its_family_and_the_rest():
    small = dataclasses.replace(GAP_PAIRS["gap-d5"], train_problems=600)
    spec = small.models[0]
    pool = training_problems(spec, small, 0)
    weights = mix_weights(spec, small, pool)
    assert sum(weights.values()) == pytest.approx(1.0)
    assert weights["carry"] + weights["addition"] == pytest.approx(0.75 / 3)
    assert set(weights) == {mix_key(p, small) for p in pool}
    assert key_targets(spec, small)["borrow"] == 0.05
    assert key_targets(spec, small)["carry"] == 0.5


def test_checks_and_report_hold_every_family_apart():
    problems = target_problems(D0, 0)
    keys = [mix_key(p, D0) for p in problems]
    for key in ("carry", "borrow", "addition", "subtraction", "gcd"):
        assert keys.count(key) == D0.targets.check_prompts
    assert all(
        not in_family("borrow", p)
        for p, k in zip(problems, keys, strict=True)
        if k == "subtraction"
    )
    evaluation = evaluation_problems(D0, 0)
    assert [mix_key(p, D0) for p in evaluation].count("carry") == D0.eval_prompts_per_skill
    assert all("/test/" in p.id for p in evaluation)


QUICK_GAP = dataclasses.replace(
    gap_pair("gap-test", 0.0),
    shape=TinyShape(hidden=16, layers=1, heads=2, max_positions=256),
    sft=SFTConfig(steps=12, batch_size=4, bucket_batches=2, warmup_steps=1),
    train_problems=64,
    eval_prompts_per_skill=1,
    eval_n=2,
    eval_max_new_tokens=8,
    targets=WarmStartTargets(
        check_every=4, first_check=4, check_prompts=1, check_n=2, check_max_new_tokens=8
    ),
)


def test_a_small_gap_build_records_its_weights_and_families(tmp_path):
    paths = build_tiny_pair(tmp_path, config=QUICK_GAP, workers=0, log=lambda _: None)
    build = json.loads((paths["gap-test-a"].parent / COMPLETE_FILE).read_text())
    for name, path in paths.items():
        digest = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
        assert build["weights_sha256"][name] == digest
    # the kernels that built them: the same key builds other weights on another CPU
    assert build["machine"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert build["config"]["gap"]["families"] == ["borrow", "carry"]
    report = json.loads((paths["gap-test-a"].parent / REPORT_FILE).read_text())
    assert {"borrow", "carry", "subtraction"} <= set(report["models"]["gap-test-a"]["skills"])
    checks = build["training"]["gap-test-b"]["target_checks"]
    assert checks and "carry" in checks[0]["pass_at_1"]  # measured, though withheld
