"""Model forwards shared by sampling (`policies.generation`), scoring and training.

Sampling and the training forward must compute the same function, or every
importance ratio is silently off. In float32 they agree to float rounding (~1e-5
nats per token); in bfloat16 (weights or autocast) the cached and the full forward
round differently, up to ~0.1 nats on a rare token. Both use one batch layout: prompts
left-padded to a common length, responses right-padded after them, attention mask
0 on every pad, position ids counted over real tokens only
(``cumsum(mask) - 1``). Padding then changes nothing but float rounding.

Every reported log-probability is ``log_softmax(logits / temperature)`` of the
chosen token in float32, before top-p truncation (see `policies.base`).

Shared prompts. A GRPO batch holds every prompt n times, and the prompt is usually
most of each row (on the tiny models ~90 prompt tokens to <= 32 response tokens).
So each distinct prompt is run once (`prefill`) and its KV cache and last logits
are copied to every row that has it; the responses then run as a continuation of
that cache. With grad enabled the copy is an index op, so the gradient of every row
flows back into the one shared prompt forward: the same gradient as running each
row in full, for a fraction of the work. Sampling always shares; scoring and
training share when `share_prompts=True` and some prompt repeats (not under
gradient checkpointing, which turns the cache off in training mode).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch


def _forward_kwargs(model: torch.nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def cache_argument(model: torch.nn.Module) -> str:
    """transformers >= 5 calls the KV cache `cache`; 4.x called it `past_key_values`."""
    return "cache" if "cache" in _forward_kwargs(model) else "past_key_values"


def output_cache(output) -> object:
    """The KV cache a forward returned (`cache` in transformers >= 5, else `past_key_values`)."""
    return output["cache" if "cache" in output.keys() else "past_key_values"]  # noqa: SIM118


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens, so left padding does not shift them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def pack_prompt_response(
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad prompts, right-pad responses: (input_ids, attention_mask, targets, target_mask).

    `targets` [B, R] are the response tokens right-padded with `pad_id`;
    `target_mask` [B, R] is 1 on real response tokens.
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
    prompt_len = max(len(p) for p in prompt_ids)
    response_len = max(len(r) for r in response_ids)
    rows, masks, targets, target_masks = [], [], [], []
    for prompt, response in zip(prompt_ids, response_ids, strict=True):
        left, right = prompt_len - len(prompt), response_len - len(response)
        rows.append([pad_id] * left + list(prompt) + list(response) + [pad_id] * right)
        masks.append([0] * left + [1] * (len(prompt) + len(response)) + [0] * right)
        targets.append(list(response) + [pad_id] * right)
        target_masks.append([1] * len(response) + [0] * right)

    def as_tensor(data: list[list[int]]) -> torch.Tensor:
        return torch.tensor(data, dtype=torch.long, device=device)

    return as_tensor(rows), as_tensor(masks), as_tensor(targets), as_tensor(target_masks)


@dataclass
class PromptPrefix:
    """Each row's prompt run through the model: its KV cache, mask and next-token logits.

    `attention_mask` [B, P] is the left-padded prompt mask, `next_position` [B] the
    position id of the first response token and `last_logits` [B, V] (float32, no
    temperature) the logits that predict it.
    """

    cache: object
    last_logits: torch.Tensor
    attention_mask: torch.Tensor
    next_position: torch.Tensor


def prefill(
    model: torch.nn.Module, prompt_ids: Sequence[Sequence[int]], pad_id: int
) -> PromptPrefix:
    """Run every distinct prompt once (left-padded) and expand the result to one row each.

    Differentiable when grad is enabled: rows sharing a prompt share its forward, and
    their gradients sum into it.
    """
    device = next(model.parameters()).device
    distinct: dict[tuple[int, ...], int] = {}
    rows = [distinct.setdefault(tuple(ids), len(distinct)) for ids in prompt_ids]
    unique = [list(ids) for ids in distinct]
    input_ids, attention_mask, _, _ = pack_prompt_response(
        unique, [[] for _ in unique], pad_id, device
    )
    positions = position_ids_from_mask(attention_mask)
    kwargs = {"logits_to_keep": 1} if "logits_to_keep" in _forward_kwargs(model) else {}
    output = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=positions,
        use_cache=True,
        **kwargs,
    )
    cache = output_cache(output)
    last_logits = output.logits[:, -1, :].float()
    next_position = positions[:, -1] + 1
    if len(unique) < len(rows):
        if not hasattr(cache, "batch_select_indices"):
            raise TypeError(
                f"{type(model).__name__} returned a {type(cache).__name__} cache without "
                "batch_select_indices; shared-prompt forwards need a transformers Cache"
            )
        index = torch.tensor(rows, dtype=torch.long, device=device)
        cache.batch_select_indices(index)
        last_logits, attention_mask = last_logits[index], attention_mask[index]
        next_position = next_position[index]
    return PromptPrefix(cache, last_logits, attention_mask, next_position)


def _checkpointing(model: torch.nn.Module) -> bool:
    """Gradient checkpointing is active (training mode): transformers then drops the cache."""
    return model.training and any(
        getattr(module, "gradient_checkpointing", False) is True for module in model.modules()
    )


def _shared_prompt_logits(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    targets: torch.Tensor,
    target_mask: torch.Tensor,
    pad_id: int,
) -> torch.Tensor:
    """Logits [B, R, V] predicting each response token: prompts prefilled once, then the
    responses (all but their last token, which predicts nothing) continue the cache."""
    prefix = prefill(model, prompt_ids, pad_id)
    logits = [prefix.last_logits.unsqueeze(1)]
    if targets.shape[1] > 1:
        attention_mask = torch.cat([prefix.attention_mask, target_mask[:, :-1]], 1)
        width = targets.shape[1] - 1
        output = model(
            input_ids=targets[:, :-1],
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask)[:, -width:],
            use_cache=True,
            **{cache_argument(model): prefix.cache},
        )
        logits.append(output.logits[:, -width:, :].float())
    return torch.cat(logits, 1)


@dataclass
class ResponseLogprobs:
    """Log-probs of response tokens [B, R] (0 on padding) and what they came from."""

    logprobs: torch.Tensor
    mask: torch.Tensor
    entropy_sum: float


def response_logprobs(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float,
    with_entropy: bool = True,
    share_prompts: bool = False,
) -> ResponseLogprobs:
    """Teacher-forced log-probs of each response token given its prompt.

    Differentiable when grad is enabled. Only the logits of response positions are
    materialised (`logits_to_keep`), which matters for 50k-260k vocabularies.
    `entropy_sum` is the summed (detached) entropy of the temperature-scaled
    distribution over real response positions, for monitoring (0 unless
    `with_entropy`). `share_prompts`: run each repeated prompt once (module
    docstring); the result differs from the single pass only by float rounding.
    Off by default so the SFT warm-start (and the tiny pair it builds) is unchanged.
    """
    if any(len(r) == 0 for r in response_ids):
        raise ValueError("every response needs at least one token (its EOS at least)")
    device = next(model.parameters()).device
    input_ids, attention_mask, targets, target_mask = pack_prompt_response(
        prompt_ids, response_ids, pad_id, device
    )
    response_len = targets.shape[1]
    repeats = len({tuple(ids) for ids in prompt_ids}) < len(prompt_ids)
    if share_prompts and repeats and not _checkpointing(model):
        logits = _shared_prompt_logits(model, prompt_ids, targets, target_mask, pad_id)
    else:
        kwargs = {}
        if "logits_to_keep" in _forward_kwargs(model):
            kwargs["logits_to_keep"] = response_len + 1
        output = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
            **kwargs,
        )
        # Position i predicts token i + 1: the last R + 1 positions minus the final one.
        logits = output.logits[:, -(response_len + 1) : -1, :].float()
    log_probs = torch.log_softmax(logits / temperature, dim=-1)
    chosen = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    mask = target_mask.to(chosen.dtype)
    entropy_sum = 0.0
    if with_entropy:
        with torch.no_grad():
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            entropy_sum = float((entropy * mask).sum())
    return ResponseLogprobs(logprobs=chosen * mask, mask=target_mask, entropy_sum=entropy_sum)
