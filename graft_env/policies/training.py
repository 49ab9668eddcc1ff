"""One optimisation pass over a TrainBatch, minibatch by minibatch.

The loss is whatever the algorithm passes in (`loss_fn(new_logp, sequences)`); the
policy only supplies new log-probs on its own tokenisation and runs the optimiser.

Micro-batching (to bound memory) must not change the loss: a token-mean over the
minibatch is not the mean of micro-batch token-means. Rather than assume how the
loss normalises, micro-batching runs two passes: a no-grad forward of every
micro-batch gives the full [B, T] `new_logp`, the loss and its gradient with
respect to `new_logp` are computed once on the whole minibatch, then each
micro-batch is re-run with grad and back-propagates its slice of that gradient.
The result equals the single-pass gradient for any loss, at the cost of one extra
forward. Every forward runs each repeated prompt once (`forward.response_logprobs`
with `share_prompts`), so a GRPO group's n rows pay for their prompt once.

Micro-batches are `micro_batch_size` consecutive rows, or, with
`max_tokens_per_micro_batch`, rows grouped by length under that token budget
(`policies.micro_batches`); the loss always sees the whole minibatch in its own order.
The returned `padding_share` is the share of the forwards' token positions that were
padding. With `padding_free` every forward packs its rows into one row with no padding
(`policies.forward`; no prompt sharing then), the budget counts real tokens and the
share is 0.

A loss with a KL term (`Algorithm.needs_reference`, see `wants_reference`) also
gets `ref_logp`: the same [B, T] log-probs under a frozen reference model, from one
no-grad forward per minibatch next to the policy's. Any other loss is called with
`(new_logp, sequences)` only, and no reference forward runs.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from graft_env.policies.base import LossFn
from graft_env.policies.forward import ResponseLogprobs, response_logprobs
from graft_env.policies.micro_batches import micro_batches, token_counts
from graft_env.policies.options import HFPolicyOptions
from graft_env.types import TrainSequence


@dataclass(frozen=True)
class OptimStep:
    """How each minibatch turns into one optimiser step.

    precision: the context each forward runs in (`HFPolicy.compute_precision`:
        autocast for mixed precision); losses, backward and the step run outside it.
    reference: the frozen model whose log-probs the loss takes as `ref_logp`, for
        losses that `wants_reference`; None for every other loss.
    """

    temperature: float
    pad_id: int
    grad_clip: float
    micro_batch_size: int | None
    max_tokens_per_micro_batch: int | None = None
    logits_chunk_tokens: int | None = HFPolicyOptions.logits_chunk_tokens
    padding_free: bool = False
    precision: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    reference: torch.nn.Module | None = None


def wants_reference(loss_fn: LossFn) -> bool:
    """Whether `loss_fn` takes `ref_logp`: it, or the object it is a method of (the
    algorithm, for `Algorithm.loss`), has a true `needs_reference`."""
    return bool(getattr(getattr(loss_fn, "__self__", loss_fn), "needs_reference", False))


def _pad_rows(spans: list[list[int]], results: list[torch.Tensor], width: int) -> torch.Tensor:
    """[B, width] from each span's [len(span), R_span] rows, back in minibatch order."""
    rows: dict[int, torch.Tensor] = {}
    for span, result in zip(spans, results, strict=True):
        rows.update(zip(span, result, strict=True))
    pad = torch.nn.functional.pad
    return torch.stack([pad(rows[j], (0, width - rows[j].shape[0])) for j in sorted(rows)])


def stats_as_floats(stats: dict, where: str) -> dict[str, float]:
    """A loss's stats as floats; TypeError naming `where` and the stat that is no number."""
    converted = {}
    for key, value in stats.items():
        try:
            converted[key] = float(value)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{where}: loss stat {key!r} is not a number: {value!r}") from err
    return converted


@dataclass
class _Gradients:
    """One minibatch's back-propagated loss and what its forwards saw."""

    loss: float
    entropy_sum: float
    stats: dict
    real_tokens: int
    padded_tokens: int


def _minibatch_gradients(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    sequences: Sequence[TrainSequence],
    loss_fn: LossFn,
    step: OptimStep,
) -> _Gradients:
    """Back-propagate one minibatch's loss."""
    response_ids = [list(seq.response_token_ids) for seq in sequences]
    prompt_lens, response_lens = [len(p) for p in prompt_ids], [len(r) for r in response_ids]
    spans = micro_batches(
        prompt_lens,
        response_lens,
        size=step.micro_batch_size,
        budget=step.max_tokens_per_micro_batch,
        where="update minibatch",
        padding_free=step.padding_free,
    )
    real, padded = token_counts(spans, prompt_lens, response_lens, step.padding_free)

    def forward(span: list[int], module: torch.nn.Module = model) -> ResponseLogprobs:
        with step.precision():
            return response_logprobs(
                module,
                [prompt_ids[i] for i in span],
                [response_ids[i] for i in span],
                pad_id=step.pad_id,
                temperature=step.temperature,
                with_entropy=module is model,  # the reference only supplies ref_logp
                share_prompts=True,
                logits_chunk_tokens=step.logits_chunk_tokens,
                padding_free=step.padding_free,
            )

    def all_logprobs(module: torch.nn.Module) -> torch.Tensor:
        with torch.no_grad():
            return _pad_rows(spans, [forward(span, module).logprobs for span in spans], width)

    width = max(response_lens)
    extra = {}
    if step.reference is not None:
        extra["ref_logp"] = all_logprobs(step.reference)

    if len(spans) == 1:
        result = forward(spans[0])
        loss, stats = loss_fn(result.logprobs, sequences, **extra)
        loss.backward()
        return _Gradients(float(loss.detach()), result.entropy_sum, stats, real, padded)

    new_logp = all_logprobs(model).requires_grad_(True)
    loss, stats = loss_fn(new_logp, sequences, **extra)
    loss.backward()
    upstream = new_logp.grad
    lengths = torch.tensor(response_lens, device=upstream.device)
    padding = torch.arange(width, device=upstream.device)[None, :] >= lengths[:, None]
    if bool((upstream[padding] != 0).any()):
        raise ValueError(
            "loss_fn has a gradient on padding positions of new_logp (beyond a length)"
        )
    entropy_sum = 0.0
    for span in spans:
        result = forward(span)
        rows = torch.tensor(span, device=upstream.device)
        result.logprobs.backward(upstream[rows, : result.logprobs.shape[1]])
        entropy_sum += result.entropy_sum
    return _Gradients(float(loss.detach()), entropy_sum, stats, real, padded)


def optimise(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    prompt_ids: list[list[int]],
    sequences: Sequence[TrainSequence],
    minibatches: Sequence[Sequence[int]],
    loss_fn: LossFn,
    step: OptimStep,
) -> dict[str, float]:
    """Run `minibatches` in order; `prompt_ids[j]` is the tokenised prompt of `sequences[j]`.

    Returns the mean over minibatches of loss, pre-clip grad norm and every loss
    stat, the token-mean entropy, the total response token count and the forwards'
    `padding_share` (padded positions that hold no token, of all positions). The ratio of
    two averaged count stats is their pooled ratio over the step; an averaged
    fraction would not be, which is why losses report counts.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    stats: list[dict[str, float]] = []
    losses, grad_norms, entropy_sum, tokens, real, padded = [], [], 0.0, 0, 0, 0
    for number, indices in enumerate(minibatches):
        batch_sequences = [sequences[i] for i in indices]
        batch_prompts = [prompt_ids[i] for i in indices]
        optimizer.zero_grad(set_to_none=True)
        result = _minibatch_gradients(model, batch_prompts, batch_sequences, loss_fn, step)
        loss = result.loss
        if not math.isfinite(loss):
            raise FloatingPointError(f"minibatch {number}: loss is {loss}; no step taken")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, step.grad_clip))
        if not math.isfinite(grad_norm):
            raise FloatingPointError(f"minibatch {number}: grad norm is {grad_norm}; no step taken")
        optimizer.step()
        losses.append(loss)
        grad_norms.append(grad_norm)
        entropy_sum += result.entropy_sum
        tokens += sum(len(seq.response_token_ids) for seq in batch_sequences)
        real, padded = real + result.real_tokens, padded + result.padded_tokens
        stats.append(stats_as_floats(result.stats, f"minibatch {number}"))
    optimizer.zero_grad(set_to_none=True)
    return pass_metrics(
        losses,
        grad_norms,
        stats,
        entropy_sum=entropy_sum,
        tokens=tokens,
        sequences=sum(len(i) for i in minibatches),
        real=real,
        padded=padded,
    )


def pass_metrics(
    losses: Sequence[float],
    grad_norms: Sequence[float],
    stats: Sequence[dict[str, float]],
    *,
    entropy_sum: float,
    tokens: int,
    sequences: int,
    real: int,
    padded: int,
) -> dict[str, float]:
    """The metrics of one pass from its minibatches' losses, pre-clip grad norms and loss
    stats (in minibatch order) and its totals: the entropy sum over response tokens,
    response tokens, sequences, and the forwards' real tokens and padded positions.

    Means over minibatches of the loss, the grad norm and every stat; `entropy` is the
    token mean; `padding_share` the share of padded positions that hold no token.
    """
    totals: dict[str, float] = {}
    for minibatch in stats:
        for key, value in minibatch.items():
            totals[key] = totals.get(key, 0.0) + value
    count = len(losses)
    metrics = {f"loss_fn/{key}": value / count for key, value in totals.items()}
    metrics.update(
        loss=sum(losses) / count,
        grad_norm=sum(grad_norms) / count,
        grad_norm_max=max(grad_norms),
        entropy=entropy_sum / max(tokens, 1),
        tokens=float(tokens),
        minibatches=float(count),
        sequences=float(sequences),
        padding_share=1.0 - real / max(padded, 1),
    )
    return metrics
