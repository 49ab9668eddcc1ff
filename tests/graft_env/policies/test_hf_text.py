"""Text paths of HFPolicy: peer re-tokenisation round-trips, prompts, load errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graft_env.policies.base import Policy, SamplingParams
from graft_env.policies.hf import HFPolicy, HFPolicyOptions
from graft_env.policies.tiny.tokenizer import PLAIN_STYLE, train_tokenizer
from graft_env.prompts import INSTRUCTION


def boosted_eos(policy: HFPolicy, boost: float):
    """A forward hook raising the EOS logit, so that some rows stop early and some are cut."""

    def hook(module, inputs, logits):
        logits[..., policy.eos_id] += boost
        return logits

    return policy.model.get_output_embeddings().register_forward_hook(hook)


@pytest.mark.parametrize(("source_name", "receiver_name"), [("gpt2", "llama"), ("llama", "gpt2")])
def test_a_peer_text_is_re_tokenised_ending_as_the_source_ended_it(
    make_policy, model_dirs, source_name, receiver_name
):
    """The receiver's EOS follows a response the source ended with its own EOS, never one
    that `max_new_tokens` cut: that would teach the receiver to stop where the source was
    cut off."""
    source = make_policy(model_dirs[source_name])
    receiver = make_policy(model_dirs[receiver_name])
    hook = boosted_eos(source, 2.5)
    try:
        [group] = source.generate(
            [source.format_prompt("What is 7 + 8?")], 8, SamplingParams(max_new_tokens=6, seed=2)
        )
    finally:
        hook.remove()
    reasons = [g.finish_reason for g in group]
    assert set(reasons) == {"stop", "length"}, reasons
    receiver_prompt = receiver.format_prompt("What is 7 + 8?")
    scored = receiver.score([receiver_prompt] * 8, [g.text for g in group], reasons)
    for gen, item in zip(group, scored, strict=True):
        ended = gen.finish_reason == "stop"
        assert item.token_ids.count(receiver.eos_id) == int(ended)
        assert (item.token_ids[-1] == receiver.eos_id) == ended
        assert receiver.decode_response(item.token_ids) == gen.text
        assert len(item.logprobs) == len(item.token_ids)


@pytest.fixture(scope="module")
def both_policies(model_dirs) -> list[HFPolicy]:
    return [HFPolicy(directory) for directory in model_dirs.values()]


@settings(max_examples=40, deadline=None)
@given(text=st.text(max_size=60))
def test_any_text_round_trips(both_policies, text):
    for policy in both_policies:
        for finish_reason in ("stop", "length"):
            ids = policy.encode_response(text, finish_reason)
            assert policy.decode_response(ids) == text


def test_special_token_strings_in_a_response_are_plain_text(make_policy, model_dirs):
    policy = make_policy(model_dirs["llama"])
    ids = policy.encode_response("a<|im_end|>b", "stop")
    assert ids.count(policy.eos_id) == 1 and ids[-1] == policy.eos_id
    assert policy.decode_response(ids) == "a<|im_end|>b"


def test_an_unknown_finish_reason_is_refused(policy):
    with pytest.raises(ValueError, match=r"finish reason 'eos'.*\('stop', 'length'\)"):
        policy.encode_response("1", "eos")


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


@pytest.mark.parametrize("local_files_only", [False, True])
def test_a_hub_model_that_cannot_be_had_offline_says_how_to_get_it(local_files_only):
    """The tests run with HF_HUB_OFFLINE=1 (tests/conftest.py): a Hub id not in the cache is one
    line naming the fix."""
    options = HFPolicyOptions(local_files_only=local_files_only)
    with pytest.raises(ValueError) as error:
        HFPolicy("graft-tests/no-such-model", options=options)
    message = str(error.value)
    assert message.startswith(
        "cannot load a tokenizer 'graft-tests/no-such-model': not in the Hugging Face cache"
    )
    assert "hf download graft-tests/no-such-model" in message and "\n" not in message
    assert ("options.local_files_only in a run config" in message) == local_files_only
