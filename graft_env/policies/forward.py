"""Model forwards shared by sampling, scoring and training.

Sampling and the training forward must compute bit-for-bit the same function, or
every importance ratio is silently off. So both use one batch layout: prompts
left-padded to a common length, responses right-padded after them, attention mask
0 on every pad, position ids counted over real tokens only
(``cumsum(mask) - 1``). Padding then changes nothing but float rounding.

Every reported log-probability is ``log_softmax(logits / temperature)`` of the
chosen token in float32, before top-p truncation (see `policies.base`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from graft_env.policies.base import SamplingParams


def _forward_kwargs(model: torch.nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _cache_argument(model: torch.nn.Module) -> str:
    """transformers >= 5 calls the KV cache `cache`; 4.x called it `past_key_values`."""
    return "cache" if "cache" in _forward_kwargs(model) else "past_key_values"


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
) -> ResponseLogprobs:
    """Teacher-forced log-probs of each response token given its prompt.

    Differentiable when grad is enabled. Only the logits of response positions are
    materialised (`logits_to_keep`), which matters for 50k-260k vocabularies.
    `entropy_sum` is the summed (detached) entropy of the temperature-scaled
    distribution over real response positions, for monitoring (0 unless
    `with_entropy`).
    """
    if any(len(r) == 0 for r in response_ids):
        raise ValueError("every response needs at least one token (its EOS at least)")
    device = next(model.parameters()).device
    input_ids, attention_mask, targets, target_mask = pack_prompt_response(
        prompt_ids, response_ids, pad_id, device
    )
    response_len = targets.shape[1]
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
    logits = output.logits[:, -(response_len + 1) : -1, :].float() / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    chosen = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    mask = target_mask.to(chosen.dtype)
    entropy_sum = 0.0
    if with_entropy:
        with torch.no_grad():
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            entropy_sum = float((entropy * mask).sum())
    return ResponseLogprobs(logprobs=chosen * mask, mask=target_mask, entropy_sum=entropy_sum)


def _choose_tokens(
    logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator
) -> torch.Tensor:
    """Draw one token per row from softmax(logits / T), truncated to the top-p nucleus.

    Inverse-CDF sampling with one uniform per row keeps the random stream a pure
    function of the seed and the batch size.
    """
    if sampling.temperature == 0.0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= sampling.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    cdf = probs.double().cumsum(-1)
    uniform = torch.rand(
        probs.shape[0], generator=generator, device=probs.device, dtype=torch.float64
    )
    draw = (uniform * cdf[:, -1]).unsqueeze(-1)
    return torch.searchsorted(cdf, draw, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


@dataclass
class SampledBatch:
    """Per row: the sampled tokens (EOS included when it stopped) and their log-probs."""

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    stopped: list[bool]


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    sampling: SamplingParams,
    *,
    eos_id: int,
    pad_id: int,
    temperature: float,
    generator: torch.Generator,
) -> SampledBatch:
    """Autoregressive sampling with a KV cache, recording log-probs as training sees them.

    Rows that have emitted EOS are dropped from the batch (and the cache) once they
    make up a quarter of it, so a group's short answers do not pay for its long ones.
    """
    device = next(model.parameters()).device
    empty = [[] for _ in prompt_ids]
    input_ids, attention_mask, _, _ = pack_prompt_response(prompt_ids, empty, pad_id, device)
    positions = position_ids_from_mask(attention_mask)
    cache_argument = _cache_argument(model)
    output = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=True
    )
    batch, max_new = input_ids.shape[0], sampling.max_new_tokens
    all_tokens = torch.full((batch, max_new), pad_id, dtype=torch.long, device=device)
    all_logprobs = torch.zeros((batch, max_new), dtype=torch.float32, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    active = torch.arange(batch, device=device)  # original row of each batch row
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    next_position = positions[:, -1] + 1
    for step in range(max_new):
        logits = output.logits[:, -1, :].float()
        tokens = _choose_tokens(logits, sampling, generator).masked_fill(finished, pad_id)
        log_probs = torch.log_softmax(logits / temperature, dim=-1)
        all_logprobs[active, step] = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        all_tokens[active, step] = tokens
        lengths[active] += (~finished).long()
        finished |= tokens == eos_id
        if bool(finished.all()) or step == max_new - 1:
            break
        cache = output["cache" if "cache" in output.keys() else "past_key_values"]  # noqa: SIM118
        if 4 * int(finished.sum()) >= len(active) and hasattr(cache, "batch_select_indices"):
            keep = (~finished).nonzero().squeeze(-1)
            cache.batch_select_indices(keep)
            active, tokens, finished = active[keep], tokens[keep], finished[keep]
            attention_mask, next_position = attention_mask[keep], next_position[keep]
        attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], 1)
        output = model(
            input_ids=tokens.unsqueeze(-1),
            attention_mask=attention_mask,
            position_ids=next_position.unsqueeze(-1),
            use_cache=True,
            **{cache_argument: cache},
        )
        next_position = next_position + 1
    sizes = lengths.tolist()
    token_ids = [row[:size] for row, size in zip(all_tokens.tolist(), sizes, strict=True)]
    return SampledBatch(
        token_ids=token_ids,
        logprobs=[row[:size] for row, size in zip(all_logprobs.tolist(), sizes, strict=True)],
        stopped=[bool(ids) and ids[-1] == eos_id for ids in token_ids],
    )
