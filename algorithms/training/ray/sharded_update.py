"""One optimisation pass of a worker-group rank: the rank's rows, the whole minibatch's loss.

Each minibatch's micro-batches are dealt out over the ranks (`split.rank_spans`). Per
minibatch, every rank:

1. runs a no-grad forward of its micro-batches, and the ranks all-gather the log-probs
   into the minibatch's whole [B, T] `new_logp` (and `ref_logp` for a KL loss);
2. computes `loss_fn` on the whole minibatch, identically on every rank, and its
   gradient with respect to `new_logp`, so the Eq.10 normaliser (token count or
   Dr.GRPO's constant), the KL and SGT terms and every loss stat are the global ones,
   for any loss, with no assumption about how it normalises;
3. re-runs its micro-batches with grad and back-propagates its rows of that gradient;
   FSDP2 reduce-scatters the sum over ranks (`fsdp.shard`), which is the gradient one
   process computes on the whole minibatch;
4. clips over the sharded gradients (`clip_grad_norm_` on DTensors: the global norm) and
   steps its AdamW shard.

This is `policies.training`'s micro-batched pass with the ranks in place of micro-batches
(one extra forward per minibatch, as there). The metrics are `optimise`'s, with the
entropy and padding counts summed over ranks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from algorithms.training.ray.split import fixed_spans, padded_positions, rank_spans
from graft_env.policies import HFPolicy, LossFn
from graft_env.policies.forward import response_logprobs
from graft_env.policies.precision import half_precision_training_error
from graft_env.policies.training import wants_reference
from graft_env.types import TrainBatch


def gather_rows(
    spans: list[list[list[int]]], mine: Sequence[torch.Tensor], rows: int, width: int
) -> torch.Tensor:
    """The [rows, width] tensor whose row j is the rank-local result holding row j.

    `spans[r]` lists rank r's micro-batches (row positions); `mine[i]` is this rank's
    [len(span_i), R_i] result for its span i. Padded to equal shapes for `all_gather`."""
    rank, world = dist.get_rank(), dist.get_world_size()
    counts = [sum(len(span) for span in rank_spans_) for rank_spans_ in spans]
    device = mine[0].device
    local = torch.zeros(max(counts), width, device=device)
    filled = 0
    for span, result in zip(spans[rank], mine, strict=True):
        local[filled : filled + len(span), : result.shape[1]] = result.detach()
        filled += len(span)
    parts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(parts, local)
    full = torch.zeros(rows, width, device=device)
    for part, rank_spans_, count in zip(parts, spans, counts, strict=True):
        positions = [j for span in rank_spans_ for j in span]
        full[positions] = part[:count]
    return full


def _minibatch(
    policy: HFPolicy,
    prompts: list[list[int]],
    responses: list[list[int]],
    sequences: Sequence,
    loss_fn: LossFn,
    where: str,
) -> dict:
    """One minibatch's gradients on this rank; returns the loss, its stats and the
    rank-local entropy sum and token counts."""
    options, model = policy.options, policy.model
    prompt_lens, response_lens = [len(p) for p in prompts], [len(r) for r in responses]
    if options.max_tokens_per_micro_batch is not None:
        raise ValueError(
            f"{where}: a worker group forms micro-batches by micro_batch_size only so far; "
            "max_tokens_per_micro_batch is set"
        )
    spans = rank_spans(
        fixed_spans(len(responses), options.micro_batch_size), dist.get_world_size(), where
    )
    mine = spans[dist.get_rank()]
    width = max(response_lens)

    def forward(module: torch.nn.Module, span: list[int], entropy: bool):
        with policy.compute_precision():
            return response_logprobs(
                module,
                [prompts[j] for j in span],
                [responses[j] for j in span],
                pad_id=policy.pad_id,
                temperature=policy.temperature,
                with_entropy=entropy,
                share_prompts=True,
            )

    def all_logprobs(module: torch.nn.Module) -> torch.Tensor:
        with torch.no_grad():
            local = [forward(module, span, False).logprobs for span in mine]
        return gather_rows(spans, local, len(responses), width)

    extra = {}
    if wants_reference(loss_fn):
        extra["ref_logp"] = all_logprobs(policy.reference_model())
    new_logp = all_logprobs(model).requires_grad_(True)
    loss, stats = loss_fn(new_logp, sequences, **extra)
    loss.backward()
    upstream = new_logp.grad
    entropy_sum = 0.0
    for span in mine:
        result = forward(model, span, True)
        rows = torch.tensor(span, device=upstream.device)
        result.logprobs.backward(upstream[rows, : result.logprobs.shape[1]])
        entropy_sum += result.entropy_sum
    real = sum(prompt_lens[j] + response_lens[j] for span in mine for j in span)
    padded = sum(padded_positions(span, prompt_lens, response_lens) for span in mine)
    return {"loss": float(loss.detach()), "stats": stats, "local": (entropy_sum, real, padded)}


def _grad_norm(params: list[torch.nn.Parameter], clip: float) -> float:
    norm = torch.nn.utils.clip_grad_norm_(params, clip)
    return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)


def sharded_update(policy: HFPolicy, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
    """`HFPolicy.update`'s pass over `batch` with `policy.model` sharded by `fsdp.shard`
    and `policy.optimizer` over its shards; every rank returns the same metrics."""
    error = half_precision_training_error(policy.options.dtype, policy.options.lr)
    if error:
        raise ValueError(f"{policy.name}: options {error}")
    encoded = {
        index: policy.encode_prompt(batch.prompts[index])
        for index in sorted({seq.prompt_index for seq in batch.sequences})
    }
    params = [p for p in policy.model.parameters() if p.requires_grad]
    losses, norms, totals = [], [], {}
    local = torch.zeros(3, dtype=torch.float64, device=policy.device)
    tokens = sequences_count = 0
    policy.model.train(policy.options.gradient_checkpointing)  # checkpointing needs train mode
    try:
        for number, indices in enumerate(batch.minibatches):
            where = f"{policy.name}: minibatch {number} of agent {batch.agent!r}"
            sequences = [batch.sequences[i] for i in indices]
            policy.optimizer.zero_grad(set_to_none=True)
            result = _minibatch(
                policy,
                [encoded[seq.prompt_index] for seq in sequences],
                [list(seq.response_token_ids) for seq in sequences],
                sequences,
                loss_fn,
                where,
            )
            if not math.isfinite(result["loss"]):
                raise FloatingPointError(f"{where}: loss is {result['loss']}; no step taken")
            norm = _grad_norm(params, policy.options.grad_clip)
            if not math.isfinite(norm):
                raise FloatingPointError(f"{where}: grad norm is {norm}; no step taken")
            policy.optimizer.step()
            losses.append(result["loss"])
            norms.append(norm)
            local += torch.tensor(result["local"], dtype=torch.float64, device=policy.device)
            tokens += sum(len(seq.response_token_ids) for seq in sequences)
            sequences_count += len(sequences)
            for key, value in result["stats"].items():
                totals[key] = totals.get(key, 0.0) + float(value)
    finally:
        policy.model.eval()
    policy.optimizer.zero_grad(set_to_none=True)
    dist.all_reduce(local)  # gloo and nccl both reduce float64 sums
    entropy_sum, real, padded = local.tolist()
    count = len(batch.minibatches)
    metrics = {f"loss_fn/{key}": value / count for key, value in totals.items()}
    metrics.update(
        loss=sum(losses) / count,
        grad_norm=sum(norms) / count,
        grad_norm_max=max(norms),
        entropy=entropy_sum / max(tokens, 1),
        tokens=float(tokens),
        minibatches=float(count),
        sequences=float(sequences_count),
        padding_share=1.0 - real / max(padded, 1),
        lr=float(policy.optimizer.param_groups[0]["lr"]),
    )
    return metrics
