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

Padding-free rows (`padding_free=True`, the option of that name; verl's
`use_remove_padding`, TRL's `padding_free`): the rows' prompt + response tokens end to end
in one row, position ids restarting at 0 per row, no attention mask. transformers reads
the segments off the resets (`masking_utils.find_packed_sequence_indices`, and
`_is_packed_sequence` for flash attention): `flash_attention_*` run varlen kernels (no
padded position anywhere); `sdpa`, `eager` and `flex_attention` one block-diagonal
causal mask, so the linear layers run real tokens only but attention spans the whole
packed row, masked per segment (what the CPU tests run). Any other attention would let
rows see each other silently: `packing_error` refuses it in one line. The hidden states
go back to the padded [B, R, H] layout of the response positions, so everything after is
the padded path's, equal to float rounding. It takes the place of prompt sharing (a
packed row has no cache to share).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from graft_env.policies.logprobs import Head, chunked_token_logprobs, split_head, token_logprobs
from graft_env.policies.options import HFPolicyOptions

# attn_implementation -> how a packed row's segments are kept apart (module docstring): one
# entry per implementation a policy loads with (`options.ATTENTION_IMPLEMENTATIONS`).
PACKING_ATTENTION = {
    **dict.fromkeys(["eager", "sdpa"], "a block-diagonal causal mask"),
    "flex_attention": "a block mask per segment",
    **dict.fromkeys(["flash_attention_2", "flash_attention_3"], "varlen kernels"),
}


def _forward_kwargs(model: torch.nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def packing_error(model: torch.nn.Module) -> str | None:
    """Why `model` cannot run padding-free packed rows (one line), or None when it can."""
    implementation = getattr(model.config, "_attn_implementation", None)
    if implementation not in PACKING_ATTENTION:
        return (
            f"padding_free needs attn_implementation in {sorted(PACKING_ATTENTION)}; "
            f"{type(model).__name__} runs {implementation!r}, which cannot keep packed rows apart"
        )
    body, _ = split_head(model)
    if "position_ids" not in _forward_kwargs(body):
        return f"padding_free needs position ids; {type(body).__name__}.forward takes none"
    return None


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


def packed_layout(
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids [1, N], position_ids [1, N], predictors [B, R]) of the packed rows.

    `predictors[b, t]` is the packed position whose output predicts row b's response
    token t (its previous token); 0 past the row's response (masked downstream).
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
    if any(len(p) == 0 for p in prompt_ids):
        raise ValueError("padding_free: every prompt needs at least one token")
    width = max(len(r) for r in response_ids)
    tokens: list[int] = []
    positions: list[int] = []
    predictors = []
    for prompt, response in zip(prompt_ids, response_ids, strict=True):
        start, length = len(tokens), len(prompt) + len(response)
        tokens += [*prompt, *response]
        positions += range(length)
        first = start + len(prompt) - 1
        row = list(range(first, first + len(response)))
        predictors.append(row + [0] * (width - len(row)))

    def as_tensor(data: list) -> torch.Tensor:
        return torch.tensor(data, dtype=torch.long, device=device)

    return as_tensor([tokens]), as_tensor([positions]), as_tensor(predictors)


@dataclass
class PromptPrefix:
    """Each row's prompt run through the model: its KV cache, mask and next-token inputs.

    `attention_mask` [B, P] is the left-padded prompt mask, `next_position` [B] the
    position id of the first response token, `last_hidden` [B, H] the final hidden state
    that predicts it and `last_logits` [B, V] (float32, no temperature) its logits, or
    None when prefilled `with_logits=False`.
    """

    cache: object
    last_logits: torch.Tensor | None
    attention_mask: torch.Tensor
    next_position: torch.Tensor
    last_hidden: torch.Tensor


def prefill(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    pad_id: int,
    *,
    with_logits: bool = True,
) -> PromptPrefix:
    """Run every distinct prompt once (left-padded) and expand the result to one row each.

    Differentiable when grad is enabled: rows sharing a prompt share its forward, and
    their gradients sum into it.
    """
    device = next(model.parameters()).device
    body, head = split_head(model)
    distinct: dict[tuple[int, ...], int] = {}
    rows = [distinct.setdefault(tuple(ids), len(distinct)) for ids in prompt_ids]
    unique = [list(ids) for ids in distinct]
    input_ids, attention_mask, _, _ = pack_prompt_response(
        unique, [[] for _ in unique], pad_id, device
    )
    positions = position_ids_from_mask(attention_mask)
    output = body(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=positions,
        use_cache=True,
    )
    cache = output.cache
    last_hidden = output.last_hidden_state[:, -1:, :]
    last_logits = head(last_hidden)[:, -1, :].float() if with_logits else None
    last_hidden = last_hidden[:, -1, :]
    next_position = positions[:, -1] + 1
    if len(unique) < len(rows):
        if not hasattr(cache, "batch_select_indices"):
            raise TypeError(
                f"{type(model).__name__} returned a {type(cache).__name__} cache without "
                "batch_select_indices; shared-prompt forwards need a transformers Cache"
            )
        index = torch.tensor(rows, dtype=torch.long, device=device)
        cache.batch_select_indices(index)
        last_hidden, attention_mask = last_hidden[index], attention_mask[index]
        last_logits = None if last_logits is None else last_logits[index]
        next_position = next_position[index]
    return PromptPrefix(cache, last_logits, attention_mask, next_position, last_hidden)


def _checkpointing(model: torch.nn.Module) -> bool:
    """Gradient checkpointing is active (training mode): transformers then drops the cache."""
    return model.training and any(
        getattr(module, "gradient_checkpointing", False) is True for module in model.modules()
    )


@dataclass
class _Predictors:
    """What predicts each response token: the head inputs of the model's own pass
    (`pieces`, each [B, r, H]; with `drop_last` each piece's last position predicts
    nothing) after the prompt prefill's last position (`first_hidden` [B, H] and its
    `first_logits` [B, V], or None when the prompts ran in the same pass)."""

    pieces: list[torch.Tensor]
    drop_last: bool
    first_hidden: torch.Tensor | None = None
    first_logits: torch.Tensor | None = None

    def _parts(self, values: list[torch.Tensor], first: torch.Tensor | None) -> torch.Tensor:
        parts = [value[:, :-1, :] for value in values] if self.drop_last else list(values)
        if first is not None:
            parts.insert(0, first.unsqueeze(1))
        return torch.cat(parts, 1)

    def states(self) -> torch.Tensor:
        """The final hidden states [B, R, H] predicting each response token."""
        return self._parts(self.pieces, self.first_hidden)

    def logits(self, head: Head) -> torch.Tensor:
        """Their float32 logits [B, R, V], the head run on each piece as the model does."""
        return self._parts([head(piece).float() for piece in self.pieces], self.first_logits)


def _shared_prompt_predictors(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    targets: torch.Tensor,
    target_mask: torch.Tensor,
    pad_id: int,
    with_logits: bool,
) -> _Predictors:
    """Prompts prefilled once, then the responses (all but their last token, which
    predicts nothing) continue the cache."""
    body, _ = split_head(model)
    prefix = prefill(model, prompt_ids, pad_id, with_logits=with_logits)
    pieces = []
    if targets.shape[1] > 1:
        attention_mask = torch.cat([prefix.attention_mask, target_mask[:, :-1]], 1)
        width = targets.shape[1] - 1
        output = body(
            input_ids=targets[:, :-1],
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask)[:, -width:],
            use_cache=True,
            cache=prefix.cache,
        )
        pieces.append(output.last_hidden_state[:, -width:, :])
    return _Predictors(pieces, False, prefix.last_hidden, prefix.last_logits)


def _single_pass_predictors(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_len: int,
) -> _Predictors:
    """One forward of the packed rows; position i predicts token i + 1, so the last
    R + 1 positions minus the final one predict the response."""
    body, _ = split_head(model)
    output = body(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    )
    tail = output.last_hidden_state[:, -(response_len + 1) :, :]
    return _Predictors([tail], drop_last=True)


def _packed_predictors(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
) -> _Predictors:
    """One forward of the rows packed (`packed_layout`); the states at each row's
    response positions, in the padded [B, R, H] layout (past a row's end: masked)."""
    error = packing_error(model)
    if error:
        raise ValueError(error)
    body, _ = split_head(model)
    device = next(model.parameters()).device
    input_ids, position_ids, predictors = packed_layout(prompt_ids, response_ids, device)
    output = body(
        input_ids=input_ids, attention_mask=None, position_ids=position_ids, use_cache=False
    )
    return _Predictors([output.last_hidden_state[0][predictors]], drop_last=False)


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
    logits_chunk_tokens: int | None = HFPolicyOptions.logits_chunk_tokens,
    padding_free: bool = False,
) -> ResponseLogprobs:
    """Teacher-forced log-probs of each response token given its prompt.

    Differentiable when grad is enabled. Only the logits of response positions are
    computed, and at most `logits_chunk_tokens` positions' at a time (None: one pass):
    when the rows'
    R + 1 positions fit in one chunk, in one pass of the model's own ops; otherwise on
    the real (unpadded) positions chunk by chunk (`policies.logprobs`), equal to the
    single pass up to float rounding. `entropy_sum` is the summed (detached) entropy of
    the temperature-scaled distribution over real response positions, for monitoring (0
    unless `with_entropy`). `share_prompts`: run each repeated prompt once (module
    docstring); the result differs from the single pass only by float rounding.
    Off by default so the SFT warm-start (and the tiny pair it builds) is unchanged.
    `padding_free`: one packed forward of the rows (module docstring) instead of either;
    ValueError in one line where the model's attention cannot keep packed rows apart.
    """
    if any(len(r) == 0 for r in response_ids):
        raise ValueError("every response needs at least one token (its EOS at least)")
    device = next(model.parameters()).device
    input_ids, attention_mask, targets, target_mask = pack_prompt_response(
        prompt_ids, response_ids, pad_id, device
    )
    rows, response_len = targets.shape
    one_chunk = logits_chunk_tokens is None or rows * (response_len + 1) <= logits_chunk_tokens
    repeats = len({tuple(ids) for ids in prompt_ids}) < len(prompt_ids)
    if padding_free:
        predictors = _packed_predictors(model, prompt_ids, response_ids)
    elif share_prompts and repeats and not _checkpointing(model):
        predictors = _shared_prompt_predictors(
            model, prompt_ids, targets, target_mask, pad_id, with_logits=one_chunk
        )
    else:
        predictors = _single_pass_predictors(model, input_ids, attention_mask, response_len)
    _, head = split_head(model)
    mask = target_mask.to(torch.float32)
    if one_chunk:
        chosen, entropy = token_logprobs(
            predictors.logits(head), targets, temperature, with_entropy
        )
        entropy_sum = 0.0 if entropy is None else float((entropy * mask).sum())
        return ResponseLogprobs(logprobs=chosen * mask, mask=target_mask, entropy_sum=entropy_sum)
    real = target_mask.bool()
    chosen, entropy_sum = chunked_token_logprobs(
        predictors.states()[real],
        targets[real],
        head,
        temperature=temperature,
        chunk_tokens=logits_chunk_tokens,
        with_entropy=with_entropy,
    )
    logprobs = torch.zeros_like(mask).masked_scatter(real, chosen)
    return ResponseLogprobs(logprobs=logprobs, mask=target_mask, entropy_sum=entropy_sum)
