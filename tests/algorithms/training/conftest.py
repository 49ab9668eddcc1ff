"""The warm-started tiny pair, built once (cached under $GRAFT_CACHE_DIR) for loop tests.

Loop tests need models that sometimes succeed, or no exchange ever happens; a
random-init model never writes a correct \\boxed{} answer. The first run on a fresh
machine builds the pair (minutes); later runs load the cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from graft_env.policies import HFPolicy, HFPolicyOptions


@pytest.fixture(scope="session")
def tiny_pair_paths() -> dict[str, Path]:
    """The cached pair; `$GRAFT_TEST_TINY_PAIR` may name an already built pair directory."""
    prebuilt = os.environ.get("GRAFT_TEST_TINY_PAIR")
    if prebuilt:
        return {name: Path(prebuilt) / name for name in ("tiny-a", "tiny-b")}
    from graft_env.policies.tiny.build import build_tiny_pair

    return build_tiny_pair(None, 0)


@pytest.fixture
def fresh_policies(tiny_pair_paths) -> Callable[..., dict[str, HFPolicy]]:
    """`fresh_policies("tiny-a", ...)`: newly loaded policies (own weights and optimizer)."""

    def make(*names: str, lr: float = 1e-3) -> dict[str, HFPolicy]:
        options = HFPolicyOptions.from_kwargs(lr=lr, generation_batch_size=32)
        return {n: HFPolicy(tiny_pair_paths[n], name=n, options=options) for n in names}

    return make
