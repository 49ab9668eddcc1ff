"""The tiny-pair build pieces: tokenizers, warm-start, cache, report."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
import torch

from graft_env.data.procedural import SKILLS
from graft_env.policies import load_policy
from graft_env.policies.tiny.build import REPORT_FILE, TinyPairConfig, build_tiny_pair, cache_key
from graft_env.policies.tiny.models import TinyShape, build_model
from graft_env.policies.tiny.sft import SFTConfig, supervised_warm_start
from graft_env.policies.tiny.tokenizer import CHATML_STYLE, PLAIN_STYLE, train_tokenizer

CORPUS = ["Compute 123 + 45.\n3+5=8, write 8\n123 + 45 = \\boxed{168}"] * 50 + [
    "Compute gcd(36, 24).\n36 = 1*24 + 12\ngcd(36, 24) = \\boxed{12}"
] * 50

QUICK = TinyPairConfig(
    shape=TinyShape(hidden=16, layers=1, heads=2, max_positions=256),
    sft=SFTConfig(steps=3, batch_size=4, bucket_batches=2, warmup_steps=1),
    train_problems=64,
    eval_prompts_per_skill=1,
    eval_n=2,
    eval_max_new_tokens=8,
)


def test_digits_are_single_tokens_and_text_round_trips():
    tokenizer = train_tokenizer(CORPUS, PLAIN_STYLE)
    pieces = tokenizer.convert_ids_to_tokens(
        tokenizer("x = 90817", add_special_tokens=False)["input_ids"]
    )
    assert pieces[-5:] == ["9", "0", "8", "1", "7"]
    text = "Compute 7 + 8 ≠ ünïcode\n"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_the_two_styles_tokenise_differently():
    plain = train_tokenizer(CORPUS, PLAIN_STYLE)
    chat = train_tokenizer(CORPUS[50:], CHATML_STYLE)
    text = CORPUS[0]
    assert plain(text)["input_ids"] != chat(text)["input_ids"]
    assert chat.chat_template and not plain.chat_template
    assert plain.eos_token != chat.eos_token


def test_vocab_size_below_the_byte_alphabet_is_rejected():
    with pytest.raises(ValueError, match="vocab_size"):
        dataclasses.replace(PLAIN_STYLE, vocab_size=100)


def test_warm_start_lowers_the_loss():
    tokenizer = train_tokenizer(CORPUS, PLAIN_STYLE)
    examples = [
        (tokenizer(t.split("\n", 1)[0])["input_ids"], tokenizer(t.split("\n", 1)[1])["input_ids"])
        for t in CORPUS
    ]
    model = build_model("llama", len(tokenizer), 0, 1, TinyShape(hidden=32, layers=1, heads=2), 0)
    losses = supervised_warm_start(
        model, examples, 1, SFTConfig(steps=30, batch_size=8, lr=1e-2, warmup_steps=5)
    )
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5


def test_learning_rate_warms_up_then_decays_to_the_floor():
    config = SFTConfig(steps=100, lr=1.0, warmup_steps=10, final_lr_fraction=0.1)
    rates = [config.lr_at(step) for step in range(100)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(rates[9:]))
    assert rates[-1] == pytest.approx(0.1, abs=1e-3)


def test_build_models_are_seeded_and_leave_the_global_rng_alone():
    state = torch.get_rng_state()
    first = build_model("gpt2", 300, 0, 1, TinyShape(hidden=16, layers=1, heads=2), seed=3)
    again = build_model("gpt2", 300, 0, 1, TinyShape(hidden=16, layers=1, heads=2), seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    for a, b in zip(first.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="unknown tiny architecture"):
        build_model("mamba", 300, 0, 1, TinyShape(), seed=0)


def test_cache_key_depends_on_seed_and_config():
    assert cache_key(QUICK, 0) == cache_key(QUICK, 0)
    assert cache_key(QUICK, 0) != cache_key(QUICK, 1)
    assert cache_key(QUICK, 0) != cache_key(dataclasses.replace(QUICK, train_problems=65), 0)


def test_quick_build_writes_models_and_report_then_loads_from_cache(tmp_path):
    messages: list[str] = []
    paths = build_tiny_pair(tmp_path, seed=0, config=QUICK, workers=0, log=messages.append)
    assert set(paths) == {"tiny-a", "tiny-b"}
    report = json.loads((paths["tiny-a"].parent / REPORT_FILE).read_text())
    for name in paths:
        assert set(report["models"][name]["skills"]) == set(SKILLS)
        assert 0.0 <= report["models"][name]["pass_at_1"] <= 1.0
    assert set(report["complementarity"]) == {"tiny-a", "tiny-b"}
    assert report["own_skills"]["tiny-b"] == list(QUICK.models[1].skills)
    assert 0.0 <= report["models"]["tiny-a"]["own_skills_pass_at_1"] <= 1.0
    policy = load_policy(paths["tiny-b"])
    assert policy.tokenizer.chat_template and policy.eos_id == policy.tokenizer.eos_token_id
    before = len(messages)
    mtime = (paths["tiny-a"] / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_pair(tmp_path, seed=0, config=QUICK, workers=0, log=messages.append) == paths
    assert len(messages) == before  # nothing built or evaluated again
    assert (paths["tiny-a"] / "model.safetensors").stat().st_mtime_ns == mtime


def test_config_rejects_unknown_skills():
    bad = dataclasses.replace(QUICK.models[0], skills=("calculus",))
    with pytest.raises(ValueError, match="calculus"):
        TinyPairConfig(models=(bad, QUICK.models[1]))


@pytest.mark.slow
def test_default_pair_meets_the_complementarity_targets(tmp_path):
    """The tiny pair's targets: >= 40 % pass@1 on its own skill mix, 2-15 % on the
    other's, and each solves >= 40 % of the other's all-fail prompts (~12 min)."""
    paths = build_tiny_pair(tmp_path, seed=0)
    report = json.loads((paths["tiny-a"].parent / REPORT_FILE).read_text())
    for name in paths:
        model = report["models"][name]
        assert model["own_skills_pass_at_1"] >= 0.40, (name, model)
        assert 0.02 <= model["other_skills_pass_at_1"] <= 0.15, (name, model)
    for row in report["complementarity"].values():
        assert all(share is not None and share >= 0.40 for share in row.values())


def test_the_build_is_deterministic(tmp_path):
    first = build_tiny_pair(tmp_path / "one", seed=0, config=QUICK, workers=0, log=lambda _: None)
    second = build_tiny_pair(tmp_path / "two", seed=0, config=QUICK, workers=0, log=lambda _: None)
    for name in first:
        for filename in ("model.safetensors", "tokenizer.json"):
            assert (first[name] / filename).read_bytes() == (second[name] / filename).read_bytes()
    reports = [(paths["tiny-a"].parent / REPORT_FILE).read_text() for paths in (first, second)]
    assert reports[0] == reports[1]


def test_build_progress_lines_give_the_total_and_the_time_left():
    from graft_env.policies.tiny.build import progress_line

    # 1,000 of 4,000 steps done in 100 s: 3,000 left at 0.1 s a step
    line = progress_line("testbed-a", 999, 4000, 0.25, 100.0, capped=True)
    assert line == "[testbed-a] step  1000/4000 ( 25%)  loss 0.2500    100s  left <= 5m00s"
    assert progress_line("tiny-a", 1999, 2000, 0.1, 400.0, capped=False).endswith("left 0s")
    assert progress_line("tiny-a", 0, 2000, 3.0, 2.0, capped=False).endswith("left -")
