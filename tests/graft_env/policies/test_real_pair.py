"""The real small pair from PyPI GGUFs (slow: converts once, then ~1-3 min on CPU)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from graft_env.policies import REAL_NAMES, SamplingParams, load_policy
from graft_env.policies.real_pair import SOURCES

pytestmark = pytest.mark.slow


def _require_packages(name: str) -> None:
    package, module = SOURCES[name]
    for needed in ("gguf", "accelerate", module):
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"{name} needs {needed!r} installed (PyPI: {package}, gguf, accelerate)")


@pytest.fixture(scope="module")
def real_pair():
    for name in REAL_NAMES:
        _require_packages(name)
    return {name: load_policy(name) for name in REAL_NAMES}


def test_real_models_record_logprobs_the_training_forward_reproduces(real_pair):
    for policy in real_pair.values():
        prompt = policy.format_prompt("Compute 12 + 30.")
        [group] = policy.generate([prompt], 2, SamplingParams(max_new_tokens=12, seed=0))
        scored = policy.score_tokens([prompt] * 2, [g.token_ids for g in group])
        for gen, logprobs in zip(group, scored, strict=True):
            np.testing.assert_allclose(gen.logprobs, logprobs, atol=1e-4, rtol=0)


def test_peer_text_round_trips_between_the_real_tokenizers(real_pair):
    smol, gemma = real_pair["smollm2-135m"], real_pair["gemma3-270m"]
    [group] = smol.generate(
        [smol.format_prompt("Compute 7 * 6.")], 2, SamplingParams(max_new_tokens=16, seed=1)
    )
    texts = [g.text for g in group] + ["7*6 = 42, so the answer is \\boxed{42}. ü"]
    reasons = [g.finish_reason for g in group] + ["stop"]
    scored = gemma.score([gemma.format_prompt("Compute 7 * 6.")] * len(texts), texts, reasons)
    for text, reason, item in zip(texts, reasons, scored, strict=True):
        assert gemma.decode_response(item.token_ids) == text
        assert (item.token_ids[-1] == gemma.eos_id) == (reason == "stop")
        assert np.isfinite(item.mean_logp)


def test_the_pair_is_heterogeneous(real_pair):
    smol, gemma = real_pair["smollm2-135m"], real_pair["gemma3-270m"]
    assert smol.tokenizer.chat_template and not gemma.tokenizer.chat_template
    assert len(smol.tokenizer) != len(gemma.tokenizer)
    assert type(smol.model).__name__ != type(gemma.model).__name__
