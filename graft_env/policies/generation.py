"""Sampling: an own KV-cache decoding loop that records log-probs as training sees them.

Why not `model.generate`: the recorded log-probs must be those of the training
forward (`policies.forward`): same temperature, same float32 log-softmax, same
padding and position ids. The prompt prefill is shared with scoring and training
(`forward.prefill`: each distinct prompt runs once, its cache is copied to the n
rows that sample from it).

The KV cache is written in place into a buffer with room to spare
(`reserve_cache`): transformers' `DynamicLayer` concatenates at each token, which
copies the whole cache every step and was about a third of decoding time on the
tiny models. The buffer doubles when full, up to the positions the loop can add,
rather than reserving `max_new_tokens` up front: decoding is bound by reading the
cache, and on the study's evaluation (<= 34 of 128 allowed tokens) the unused
reservation made attention and every row drop read or copy ~4x the positions in use
(one 300-problem x 8 set at 512 rows: 1.5x slower). Writing in place changes no
number, only the copying.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicLayer

from graft_env.policies.base import SamplingParams
from graft_env.policies.forward import prefill


class _ReservedLayer(DynamicLayer):
    """A full-attention cache layer whose keys/values are views of a larger buffer.

    The buffer holds up to `extra` positions more than the layer it replaces; it starts
    at twice the layer's length and doubles when full (amortised O(1) copies per token,
    never more than twice the positions in use). Only `sample` uses it, which calls
    nothing on the cache but `update` (through the model) and `batch_select_indices`,
    the two methods overridden here.
    """

    def __init__(self, layer: DynamicLayer, extra: int) -> None:
        super().__init__()
        batch, heads, length, dim = layer.keys.shape
        self._limit = length + extra
        # Under autocast the keys come out of RoPE in float32 while attention computes
        # in the autocast dtype anyway: storing them in that dtype changes no result
        # and saves a third of the cache.
        device_type = layer.keys.device.type
        autocast = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type) if autocast else None
        shape = (batch, heads, min(self._limit, 2 * length), dim)
        self._key_buffer = layer.keys.new_empty(shape, dtype=dtype or layer.keys.dtype)
        self._value_buffer = layer.values.new_empty(shape, dtype=dtype or layer.values.dtype)
        self._key_buffer[:, :, :length] = layer.keys
        self._value_buffer[:, :, :length] = layer.values
        self.device, self.is_initialized, self._length = layer.keys.device, True, length
        self._expose()

    def _expose(self) -> None:
        self.keys = self._key_buffer[:, :, : self._length]
        self.values = self._value_buffer[:, :, : self._length]

    def _moved(self, buffer: torch.Tensor, rows: torch.Tensor | None, capacity: int):
        """A new buffer of `capacity` positions holding the used ones (of `rows` only)."""
        used = buffer[:, :, : self._length] if rows is None else buffer[rows, :, : self._length]
        moved = buffer.new_empty((used.shape[0], buffer.shape[1], capacity, buffer.shape[3]))
        moved[:, :, : self._length] = used
        return moved

    def update(self, key_states, value_states, *args, **kwargs):
        end = self._length + key_states.shape[-2]
        if end > self._limit:
            raise RuntimeError(f"KV cache reserved {self._limit} positions, {end} needed")
        capacity = self._key_buffer.shape[-2]
        if end > capacity:
            capacity = min(self._limit, max(end, 2 * capacity))
            self._key_buffer = self._moved(self._key_buffer, None, capacity)
            self._value_buffer = self._moved(self._value_buffer, None, capacity)
        self._key_buffer[:, :, self._length : end] = key_states
        self._value_buffer[:, :, self._length : end] = value_states
        self._length = end
        self._expose()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        capacity = self._key_buffer.shape[-2]
        self._key_buffer = self._moved(self._key_buffer, indices, capacity)
        self._value_buffer = self._moved(self._value_buffer, indices, capacity)
        self._expose()


def reserve_cache(cache: object, extra: int) -> None:
    """Let every plain full-attention layer of `cache` take `extra` more positions in place.

    Other layer kinds (sliding window, quantised, linear attention) and caches
    without per-layer objects keep transformers' own behaviour.
    """
    layers = getattr(cache, "layers", None)
    if not isinstance(layers, list):
        return
    for index, layer in enumerate(layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.numel():
            layers[index] = _ReservedLayer(layer, extra)


NUCLEUS_CANDIDATES = 64
"""Tokens ranked first when truncating to the nucleus; a batch with a wider one sorts fully."""
_MARGIN = 1e-6  # far above the float32 rounding of a cumulative sum of probabilities


def _ranked(probs: torch.Tensor, count: int) -> tuple[torch.Tensor, ...]:
    """Each row's `count` most probable tokens in descending order (all of them: a sort),
    their ids and the mass before each."""
    if count == probs.shape[-1]:
        top, order = probs.sort(dim=-1, descending=True)
    else:
        top, order = probs.topk(count, dim=-1)
    return top, order, top.cumsum(-1) - top


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`probs` [B, V] with every token outside the top-p nucleus set to 0: in descending
    order, a token stays when the mass before it is < top_p.

    Ranking the whole vocabulary per token (a sort) was 8-10 % of the tiny models'
    decoding, and grows with the vocabulary; the nucleus at the study's top-p 0.95 is a
    few tokens. So only the top `NUCLEUS_CANDIDATES` are ranked (`topk`); when some row's
    last candidate is not clearly outside the nucleus, the batch is sorted fully (a flat
    distribution, e.g. a random-init model, then pays one small `topk` more than before).
    The kept set is the full sort's: a cumulative sum's prefix does not depend on what
    follows it, and the margin covers the rounding of the tokens left unranked.
    """
    vocab = probs.shape[-1]
    top, order, mass_before = _ranked(probs, min(vocab, NUCLEUS_CANDIDATES))
    if top.shape[-1] < vocab and not bool((mass_before[:, -1] >= top_p + _MARGIN).all()):
        top, order, mass_before = _ranked(probs, vocab)  # some row's nucleus may be wider
    top = top.masked_fill(mass_before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, top)


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
        probs = nucleus(probs, sampling.top_p)
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

    Each distinct prompt is prefilled once (`forward.prefill`). Rows that have
    emitted EOS are dropped from the batch (and the cache) once they make up a
    quarter of it, so a group's short answers do not pay for its long ones.
    """
    device = next(model.parameters()).device
    prefix = prefill(model, prompt_ids, pad_id)
    cache, logits = prefix.cache, prefix.last_logits
    reserve_cache(cache, sampling.max_new_tokens)
    attention_mask, next_position = prefix.attention_mask, prefix.next_position
    batch, max_new = len(prompt_ids), sampling.max_new_tokens
    all_tokens = torch.full((batch, max_new), pad_id, dtype=torch.long, device=device)
    all_logprobs = torch.zeros((batch, max_new), dtype=torch.float32, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    active = torch.arange(batch, device=device)  # original row of each batch row
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    for step in range(max_new):
        tokens = _choose_tokens(logits, sampling, generator).masked_fill(finished, pad_id)
        log_probs = torch.log_softmax(logits / temperature, dim=-1)
        all_logprobs[active, step] = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        all_tokens[active, step] = tokens
        lengths[active] += (~finished).long()
        finished |= tokens == eos_id
        if bool(finished.all()) or step == max_new - 1:
            break
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
            cache=cache,
        )
        cache, logits = output.cache, output.logits[:, -1, :].float()
        next_position = next_position + 1
    sizes = lengths.tolist()
    token_ids = [row[:size] for row, size in zip(all_tokens.tolist(), sizes, strict=True)]
    return SampledBatch(
        token_ids=token_ids,
        logprobs=[row[:size] for row, size in zip(all_logprobs.tolist(), sizes, strict=True)],
        stopped=[bool(ids) and ids[-1] == eos_id for ids in token_ids],
    )
