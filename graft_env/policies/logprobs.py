"""Token log-probs and entropy from final hidden states, a bounded number of logits at a time.

A causal LM is split into its body (`model.base_model`: embeddings, layers, final norm)
and its head (`get_output_embeddings()`, then Gemma's final logit softcapping when its
config sets one), so `head(body(...).last_hidden_state)` is `model(...).logits`, op for
op. Holding the logits of every position at once costs about 4.5 float32 copies of
[rows, R, V] (the model-dtype logits, the float32 cast, the log-softmax, the entropy's
exp and product): 38-45 GB for 4 rows of 4,096 tokens on a 151,936-token vocabulary.
`chunked_token_logprobs` instead runs the head on at most `chunk_tokens` positions at a
time. Under grad each chunk is an activation checkpoint (`torch.utils.checkpoint`,
non-reentrant): its forward keeps only the chunk's hidden states and chosen log-probs,
and its backward recomputes the chunk's logits, back-propagates them into the hidden
states and the head weight, and frees them before the next chunk. This is what verl's
fused `linear_cross_entropy` kernel does by hand; Liger's fused linear cross-entropy
instead computes the gradient inside the forward, which needs the upstream gradient
there: a scalar loss's, not the per-token one a PPO surrogate sends back. The checkpoint
restores the forward's autocast state, so bfloat16 mixed precision recomputes the same
logits. The logits peak is a few float32 copies of [chunk_tokens, V], whatever R or rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

# Config fields of architectures whose forward rescales the logits in a way `Head` does not
# reproduce (Cohere's logit_scale, Granite's logits_scaling): refused, not silently wrong.
UNSUPPORTED_LOGIT_SCALES = {"logit_scale": None, "logits_scaling": 1.0}


@dataclass(frozen=True)
class Head:
    """A causal LM's hidden-states-to-logits map: its output embedding, then `softcap`."""

    linear: torch.nn.Module
    softcap: float | None = None

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.linear(hidden)
        if self.softcap is not None:  # Gemma's final_logit_softcapping, in its op order
            logits = logits / self.softcap
            logits = torch.tanh(logits)
            logits = logits * self.softcap
        return logits


def split_head(model: torch.nn.Module) -> tuple[torch.nn.Module, Head]:
    """(body, head) of a transformers causal LM: `head(body(...).last_hidden_state)`
    equals `model(...).logits`."""
    name = type(model).__name__
    body = getattr(model, "base_model", model)
    get_head = getattr(model, "get_output_embeddings", None)
    linear = get_head() if get_head is not None else None
    if body is model or linear is None:
        raise TypeError(f"{name}: no base model and output embedding to split logits from")
    config = model.config
    for key, neutral in UNSUPPORTED_LOGIT_SCALES.items():
        value = getattr(config, key, neutral)
        if value != neutral:
            raise TypeError(f"{name}: config {key}={value!r} rescales logits; not supported")
    return body, Head(linear, getattr(config, "final_logit_softcapping", None))


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log_softmax(logits / temperature) of each target id (logits [..., V] float32,
    targets [...]) and, when `with_entropy`, each position's entropy (detached)."""
    log_probs = torch.log_softmax(logits / temperature, dim=-1)
    chosen = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return chosen, None
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1)
    return chosen, entropy


def _chunk(
    states: torch.Tensor, targets: torch.Tensor, head: Head, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    return token_logprobs(head(states).float(), targets, temperature, with_entropy)


def chunked_token_logprobs(
    states: torch.Tensor,
    targets: torch.Tensor,
    head: Head,
    *,
    temperature: float,
    chunk_tokens: int,
    with_entropy: bool,
) -> tuple[torch.Tensor, float]:
    """Log-probs [N] (float32) of `targets` [N] predicted by `states` [N, H], and their
    summed entropy (0.0 unless `with_entropy`), `chunk_tokens` positions at a time."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    recompute = torch.is_grad_enabled() and states.requires_grad
    chosen, entropy_sum = [], 0.0
    for start in range(0, states.shape[0], chunk_tokens):
        span = slice(start, start + chunk_tokens)
        args = (states[span], targets[span], head, temperature, with_entropy)
        if recompute:
            part, entropy = checkpoint(_chunk, *args, use_reentrant=False)
        else:
            part, entropy = _chunk(*args)
        chosen.append(part)
        if entropy is not None:
            entropy_sum += float(entropy.sum())
    if not chosen:
        return states.new_zeros(0, dtype=torch.float32), 0.0
    return torch.cat(chosen), entropy_sum
