"""Fresh random-init tiny policies of both architectures, built once per test session.

Small (hidden 32, 2 layers) so the whole policies suite stays well under a minute;
saved to a temporary directory and loaded through the real HFPolicy path.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from graft_env.policies.hf import HFPolicy, HFPolicyOptions
from graft_env.policies.tiny.models import TinyShape, build_model
from graft_env.policies.tiny.tokenizer import CHATML_STYLE, PLAIN_STYLE, train_tokenizer

CORPUS = [
    f"What is {a} + {b}? {a} + {b} = {a + b}. The answer is \\boxed{{{a + b}}}."
    for a in range(0, 60, 3)
    for b in range(0, 60, 7)
]
SHAPE = TinyShape(hidden=32, layers=2, heads=2, max_positions=256)


def _write_model(directory: Path, architecture: str, style, seed: int) -> Path:
    tokenizer = train_tokenizer(CORPUS, style)
    model = build_model(
        architecture, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id, SHAPE, seed
    )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-random")
    return {
        "gpt2": _write_model(root / "gpt2", "gpt2", PLAIN_STYLE, seed=1),
        "llama": _write_model(root / "llama", "llama", CHATML_STYLE, seed=2),
    }


def _make_policy(path: Path, **options: object) -> HFPolicy:
    settings = {"lr": 1e-2, "generation_batch_size": 8, **options}
    return HFPolicy(path, options=HFPolicyOptions.from_kwargs(**settings))


@pytest.fixture
def make_policy() -> Callable[..., HFPolicy]:
    """`make_policy(path, **options)` with a learning rate that visibly moves weights."""
    return _make_policy


@pytest.fixture(params=["gpt2", "llama"])
def policy(request: pytest.FixtureRequest, model_dirs: dict[str, Path]) -> HFPolicy:
    return _make_policy(model_dirs[request.param])
