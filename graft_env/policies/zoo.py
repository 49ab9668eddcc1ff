"""`load_policy`: one entry point from a name or a path to a ready Policy.

Importing it loads no torch (the backends load in `load_policy`, after its options are
checked), so `inspect.signature(load_policy)` names the loader's options to a config check.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from graft_env.policies.cache import default_cache_dir
from graft_env.policies.options import (
    OPTION_PREFIX,
    ROLLOUT_BACKENDS,
    HFPolicyOptions,
    VLLMEngineOptions,
)
from graft_env.suggest import did_you_mean

if TYPE_CHECKING:
    from graft_env.policies.hf import HFPolicy

TINY_NAMES = ("tiny-a", "tiny-b")
TESTBED_NAMES = ("testbed-a", "testbed-b")  # tiny.config.TESTBED: the study's pair (issue 16)
GAP_NAMES = tuple(  # tiny.config.GAP_PAIRS: the gap study's builds (issue 29)
    f"gap-{build}-{member}"
    for build in ("d0", "d5", "d15", "d30", "strong", "weak")
    for member in ("a", "b")
)
BUILT_NAMES = TINY_NAMES + TESTBED_NAMES + GAP_NAMES  # built by tiny.build_tiny_pair
REAL_NAMES = ("smollm2-135m", "gemma3-270m")


def model_path(
    path_or_name: str | Path, *, cache_dir: str | Path | None = None, tiny_seed: int = 0
) -> Path:
    """The local directory of a built-in name (building or converting it if needed, see
    `load_policy`), or `path_or_name` itself as a path. A name that is neither, but close to
    a built-in one (`tiny-c`), is a one-line ValueError saying which was meant, before
    anything builds or loads."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    builtin = _builtin_path(str(path_or_name), cache, tiny_seed)
    if builtin is None:
        check_model_name(path_or_name)
    return Path(path_or_name) if builtin is None else builtin


def check_model_name(path_or_name: str | Path) -> None:
    """Raise a one-line ValueError for a model name that is a typo of a built-in name.

    A typo is a bare name (no `/` or path separator, no existing path) that is not built in
    but, compared in lower case with `_` and `.` read as `-`, equals a built-in name
    (`TINY-A`, `tiny_a`), is one edit from one (a character added, dropped, replaced or two
    swapped: `smolm2-135m`, `tiny-c`) or is one cut short inside its last `-` part
    (`smollm2-135`); a built-in name with anything after it (`tiny-a-sft`) is not, so
    characters added at its end are never taken for a typo: `tiny-a2` and `tiny-as` pass as
    derived names. Anything but a typo may be a hub id (`google/gemma-3-270m`, `gpt2`), a
    path (`out/gap-d30-a`) or a directory made later (`gap-d30-a-sft`), and is left to the
    loader."""
    name, names = str(path_or_name), BUILT_NAMES + REAL_NAMES
    if name in names or "/" in name or os.sep in name or Path(name).exists():
        return
    typed = _normal(name)
    if any(typed.startswith(known) and typed != known for known in names):
        return  # a name derived from a built-in one: `tiny-a-sft`
    meant = [known for known in names if _is_typo(typed, known)]
    if meant:
        raise ValueError(
            f"model {name!r} is neither a built-in model name nor an existing path"
            + did_you_mean(typed, meant, cutoff=0.0)
        )


def _normal(name: str) -> str:
    """`name` in lower case with `_` and `.` read as `-`."""
    return name.lower().replace("_", "-").replace(".", "-")


def _is_typo(typed: str, known: str) -> bool:
    """Whether normalised `typed` is built-in `known`, one edit from it or it cut short
    inside its last `-` part."""
    cut_short = known.startswith(typed) and len(typed) > known.rfind("-") + 1
    return typed == known or cut_short or _one_edit(typed, known)


def _one_edit(a: str, b: str) -> bool:
    """Whether `a` becomes `b` by adding, dropping or replacing one character, or by
    swapping two adjacent ones."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    start = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if start is None:  # one is the other plus a last character
        return True
    if len(a) != len(b):
        return a[start + (len(a) > len(b)) :] == b[start + (len(b) > len(a)) :]
    swapped = a[start + 1 : start + 2] + a[start] == b[start : start + 2]
    return a[start + 1 :] == b[start + 1 :] or (swapped and a[start + 2 :] == b[start + 2 :])


def _builtin_path(name: str, cache: Path, tiny_seed: int) -> Path | None:
    """The local directory of a built-in name (building or converting it if needed)."""
    if name in BUILT_NAMES:
        from graft_env.policies.tiny.build import (
            build_tiny_pair,  # heavy build code, only when needed
        )
        from graft_env.policies.tiny.config import pair_of

        return build_tiny_pair(cache, tiny_seed, config=pair_of(name))[name]
    if name in REAL_NAMES:
        from graft_env.policies.real_pair import real_model_path

        return real_model_path(name, cache)
    return None


def load_policy(
    path_or_name: str | Path,
    *,
    cache_dir: str | Path | None = None,
    tiny_seed: int = 0,
    rollout_backend: str = "transformers",
    **options: object,
) -> HFPolicy:
    """A transformers-trained policy for a built-in name or any local model directory.

    "tiny-a" / "tiny-b" load from the tiny-pair cache, building the pair for
    `tiny_seed` first if it is missing (~10 min on 2 CPU cores); "testbed-a" /
    "testbed-b" likewise from the testbed pair's (`tiny.config.TESTBED`).
    "smollm2-135m" / "gemma3-270m" load from the converted real pair, converting
    the PyPI GGUFs on first use (`policies.real_pair`). The cache is `cache_dir`,
    else `$GRAFT_CACHE_DIR`, else `~/.cache/graft`.

    `rollout_backend` picks what samples: "transformers" (`HFPolicy`) or "vllm"
    (`VLLMPolicy`: an in-process vLLM engine, synced after every update).
    `options` are `HFPolicyOptions` fields (`lr`, `dtype`, `device`, ...) and, for
    the vLLM backend, `vllm_<field>` for `VLLMEngineOptions` fields
    (`vllm_kv_cache_gib`, `vllm_enforce_eager`, ...); an unknown one raises a
    TypeError that lists the valid ones.
    """
    if rollout_backend not in ROLLOUT_BACKENDS:
        raise ValueError(
            f"unknown rollout_backend {rollout_backend!r}; valid: {list(ROLLOUT_BACKENDS)}"
            f"{did_you_mean(rollout_backend, ROLLOUT_BACKENDS)}"
        )
    engine_keys = [key for key in options if key.startswith(OPTION_PREFIX)]
    engine_options = {key: options.pop(key) for key in engine_keys}
    if engine_options and rollout_backend != "vllm":
        raise TypeError(
            f"policy option(s) {sorted(engine_options)} need rollout_backend='vllm' "
            f"(got {rollout_backend!r})"
        )
    policy_options = HFPolicyOptions.from_kwargs(**options)
    if policy_options.packed_decode and rollout_backend == "vllm":
        raise TypeError(
            "policy option packed_decode speeds up transformers sampling; with "
            "rollout_backend='vllm' the vLLM engine samples (and packs its own weights)"
        )
    # checked before the (possibly long) model build
    vllm_options = (
        VLLMEngineOptions.from_prefixed(engine_options) if rollout_backend == "vllm" else None
    )
    name = str(path_or_name)
    path = model_path(path_or_name, cache_dir=cache_dir, tiny_seed=tiny_seed)
    policy_name = name if name in BUILT_NAMES + REAL_NAMES else None
    if vllm_options is not None:
        from graft_env.policies.vllm_policy import VLLMPolicy

        return VLLMPolicy(
            path, name=policy_name, options=policy_options, engine_options=vllm_options
        )
    from graft_env.policies.hf import HFPolicy

    return HFPolicy(path, name=policy_name, options=policy_options)
