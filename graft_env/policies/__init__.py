"""Language-model policies behind one small interface (see `policies.base`).

    from graft_env.policies import load_policy, SamplingParams
    policy = load_policy("tiny-a")                     # or any local HF model directory
    groups = policy.generate([policy.format_prompt("Compute 2 + 3.")], 8, SamplingParams())

Log-probabilities everywhere are log softmax(logits / policy.temperature) before
top-p truncation; generation, `score` and the training forward agree on them.
"""

from graft_env.policies.base import FINISH_REASONS, Generation, LossFn, Policy, SamplingParams
from graft_env.policies.hf import HFPolicy, HFPolicyOptions
from graft_env.policies.zoo import REAL_NAMES, TINY_NAMES, default_cache_dir, load_policy

__all__ = [
    "FINISH_REASONS",
    "REAL_NAMES",
    "TINY_NAMES",
    "Generation",
    "HFPolicy",
    "HFPolicyOptions",
    "LossFn",
    "Policy",
    "SamplingParams",
    "default_cache_dir",
    "load_policy",
]
