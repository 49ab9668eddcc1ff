"""Text paths of HFPolicy: peer re-tokenisation round-trips, prompts, load errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graft_env.policies.base import Policy, SamplingParams
from graft_env.policies.hf import HFPolicy, HFPolicyOptions
from graft_env.policies.tiny_tokenizer import PLAIN_STYLE, train_tokenizer
from graft_env.prompts import INSTRUCTION


def test_peer_text_round_trips_through_the_other_tokenizer(make_policy, model_dirs):
    source = make_policy(model_dirs["gpt2"])
    receiver = make_policy(model_dirs["llama"])
    prompts = [source.format_prompt("What is 7 + 8?")]
    [group] = source.generate(prompts, 4, SamplingParams(max_new_tokens=30, seed=2))
    receiver_prompt = receiver.format_prompt("What is 7 + 8?")
    scored = receiver.score([receiver_prompt] * 4, [g.text for g in group])
    for gen, item in zip(group, scored, strict=True):
        assert item.token_ids[-1] == receiver.eos_id
        assert receiver.decode_response(item.token_ids) == gen.text
        assert len(item.logprobs) == len(item.token_ids)


@pytest.fixture(scope="module")
def both_policies(model_dirs) -> list[HFPolicy]:
    return [HFPolicy(directory) for directory in model_dirs.values()]


@settings(max_examples=40, deadline=None)
@given(text=st.text(max_size=60))
def test_any_text_round_trips(both_policies, text):
    for policy in both_policies:
        assert policy.decode_response(policy.encode_response(text)) == text


def test_special_token_strings_in_a_response_are_plain_text(make_policy, model_dirs):
    policy = make_policy(model_dirs["llama"])
    ids = policy.encode_response("a<|im_end|>b")
    assert ids.count(policy.eos_id) == 1 and ids[-1] == policy.eos_id
    assert policy.decode_response(ids) == "a<|im_end|>b"


def test_prompt_format_follows_the_chat_template_when_there_is_one(make_policy, model_dirs):
    plain = make_policy(model_dirs["gpt2"]).format_prompt("What is 1 + 1?")
    chat = make_policy(model_dirs["llama"]).format_prompt("What is 1 + 1?")
    assert plain == f"What is 1 + 1?\n\n{INSTRUCTION}\n"
    assert chat.startswith("<|im_start|>user\nWhat is 1 + 1?")
    assert chat.endswith("<|im_start|>assistant\n")


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope.*does not exist"):
        HFPolicy(tmp_path / "nope")


def test_directory_without_a_model_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"cannot load a tokenizer from .*empty"):
        HFPolicy(tmp_path / "empty")


def test_tokenizer_without_eos_is_a_clear_error(tmp_path):
    tokenizer = train_tokenizer(["1 + 1 = 2"], PLAIN_STYLE)
    tokenizer.eos_token = None
    tokenizer.save_pretrained(tmp_path / "no-eos")
    with pytest.raises(ValueError, match="no EOS token"):
        HFPolicy(tmp_path / "no-eos")


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(TypeError, match=r"\['learning_rate'\].*valid options.*'lr'"):
        HFPolicyOptions.from_kwargs(learning_rate=1e-3)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 0.0),
        ("dtype", "int8"),
        ("autocast", "float16"),
        ("micro_batch_size", 0),
        ("grad_clip", 0.0),
    ],
)
def test_bad_option_values_are_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        HFPolicyOptions(**{field: value})


def test_autocast_needs_float32_master_weights():
    with pytest.raises(ValueError, match="autocast='bfloat16' needs dtype 'float32'"):
        HFPolicyOptions(autocast="bfloat16", dtype="bfloat16")


def test_prompt_longer_than_the_model_is_rejected(make_policy, model_dirs):
    policy = make_policy(model_dirs["gpt2"])
    with pytest.raises(ValueError, match="positions"):
        policy.generate(["1 + 1 " * 200], 1, SamplingParams(max_new_tokens=8))


def test_hf_policy_satisfies_the_policy_protocol(policy):
    assert isinstance(policy, Policy)
    assert policy.temperature == 1.0 and policy.name in ("gpt2", "llama")
