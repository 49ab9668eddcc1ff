"""Language-model policies behind one small interface (see `policies.base`).

    from graft_env.policies import load_policy, SamplingParams
    policy = load_policy("tiny-a")                     # or any local HF model directory
    groups = policy.generate([policy.format_prompt("Compute 2 + 3.")], 8, SamplingParams())

Log-probabilities everywhere are log softmax(logits / policy.temperature) before
top-p truncation; generation, `score` and the training forward agree on them.

Names load on first use (PEP 562), so importing a torch-free submodule (`policies.options`,
`policies.precision`, `policies.zoo`) runs no torch import: a run config's agent options
are checked without it.
"""

from __future__ import annotations

from graft_env.lazy import lazy_exports

_EXPORTS = {
    "FINISH_REASONS": "graft_env.policies.base",
    "Generation": "graft_env.policies.base",
    "LossFn": "graft_env.policies.base",
    "Policy": "graft_env.policies.base",
    "SamplingParams": "graft_env.policies.base",
    "HFPolicy": "graft_env.policies.hf",
    "HFPolicyOptions": "graft_env.policies.options",
    "REAL_NAMES": "graft_env.policies.zoo",
    "TINY_NAMES": "graft_env.policies.zoo",
    "default_cache_dir": "graft_env.policies.cache",
    "load_policy": "graft_env.policies.zoo",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
