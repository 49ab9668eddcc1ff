"""`load_policy`: one entry point from a name or a path to a ready Policy."""

from __future__ import annotations

import os
from pathlib import Path

from graft_env.policies.hf import HFPolicy, HFPolicyOptions

TINY_NAMES = ("tiny-a", "tiny-b")
REAL_NAMES = ("smollm2-135m", "gemma3-270m")


def default_cache_dir() -> Path:
    """`$GRAFT_CACHE_DIR`, else `~/.cache/graft`."""
    return Path(os.environ.get("GRAFT_CACHE_DIR") or Path.home() / ".cache" / "graft")


def load_policy(
    path_or_name: str | Path,
    *,
    cache_dir: str | Path | None = None,
    tiny_seed: int = 0,
    **options: object,
) -> HFPolicy:
    """A transformers policy for a built-in name or any local model directory.

    "tiny-a" / "tiny-b" load from the tiny-pair cache, building the pair for
    `tiny_seed` first if it is missing (~10 min on 2 CPU cores).
    "smollm2-135m" / "gemma3-270m" load from the converted real pair, converting
    the PyPI GGUFs on first use (`policies.real_pair`). The cache is `cache_dir`,
    else `$GRAFT_CACHE_DIR`, else `~/.cache/graft`. `options` are `HFPolicyOptions`
    fields (`lr`, `dtype`, `device`, ...); an unknown one raises a TypeError that
    lists the valid ones.
    """
    policy_options = HFPolicyOptions.from_kwargs(**options)
    name = str(path_or_name)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if name in TINY_NAMES:
        from graft_env.policies.tiny import build_tiny_pair  # heavy build code, only when needed

        return HFPolicy(build_tiny_pair(cache, tiny_seed)[name], name=name, options=policy_options)
    if name in REAL_NAMES:
        from graft_env.policies.real_pair import real_model_path

        return HFPolicy(real_model_path(name, cache), name=name, options=policy_options)
    return HFPolicy(path_or_name, options=policy_options)
