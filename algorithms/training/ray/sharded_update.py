"""One optimisation pass of a worker-group rank: the rank's rows, the whole minibatch's loss.

Each minibatch's micro-batches (`policies.micro_batches`: `micro_batch_size` rows, or rows
grouped by length under `max_tokens_per_micro_batch`, as one process forms them) are
dealt out over the ranks (`split.rank_spans`). Every forward computes log-probs
`logits_chunk_tokens` positions at a time and runs inside the FSDP root's hooks
(`fsdp.in_root`), and runs the model's body exactly once: every rank must run as many
layer forwards (each one all-gathers the layer's shards), and sharing a repeated prompt
(`forward.response_logprobs(share_prompts=True)`) adds a prefill forward only where a
micro-batch happens to repeat a prompt (so it is off here, as under gradient
checkpointing locally; a gloo size mismatch and an aborted rank otherwise). Per minibatch,
every rank:

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
(one extra forward per minibatch, as there). The metrics are `policies.training.pass_metrics`,
with the entropy and padding counts summed over ranks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from algorithms.training.ray.fsdp import in_root
from algorithms.training.ray.split import rank_spans
from graft_env.policies import HFPolicy, LossFn
from graft_env.policies.forward import response_logprobs
from graft_env.policies.micro_batches import forward_tokens, micro_batches, token_counts
from graft_env.policies.precision import half_precision_training_error
from graft_env.policies.training import pass_metrics, stats_as_floats, wants_reference
from graft_env.types import TrainBatch, TrainSequence


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


def _encode_prompts(policy: HFPolicy, batch: TrainBatch) -> dict[int, list[int]]:
    indices = sorted({seq.prompt_index for seq in batch.sequences})
    return {index: policy.encode_prompt(batch.prompts[index]) for index in indices}


def _minibatch(
    policy: HFPolicy,
    encoded: dict[int, list[int]],
    sequences: Sequence[TrainSequence],
    loss_fn: LossFn,
    where: str,
) -> dict:
    """One minibatch's gradients on this rank; returns the loss, its stats and the
    rank-local entropy sum, real tokens and padded positions."""
    options, model = policy.options, policy.model
    prompts = [encoded[seq.prompt_index] for seq in sequences]
    responses = [list(seq.response_token_ids) for seq in sequences]
    prompt_lens, response_lens = [len(p) for p in prompts], [len(r) for r in responses]
    local_spans = micro_batches(
        prompt_lens,
        response_lens,
        size=options.micro_batch_size,
        budget=options.max_tokens_per_micro_batch,
        where=where,
        padding_free=options.padding_free,
    )

    def cost(span: Sequence[int]) -> int:
        return forward_tokens(span, prompt_lens, response_lens, options.padding_free)

    spans = rank_spans(local_spans, dist.get_world_size(), where, cost)
    mine = spans[dist.get_rank()]
    width = max(response_lens)

    def forward(module: torch.nn.Module, span: list[int], entropy: bool):
        def run():
            with policy.compute_precision():
                return response_logprobs(
                    module,
                    [prompts[j] for j in span],
                    [responses[j] for j in span],
                    pad_id=policy.pad_id,
                    temperature=policy.temperature,
                    with_entropy=entropy,
                    share_prompts=False,  # module docstring: one body forward per span
                    logits_chunk_tokens=options.logits_chunk_tokens,
                    padding_free=options.padding_free,
                )

        return in_root(model, run) if module is model else run()

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
    real, padded = token_counts(mine, prompt_lens, response_lens, options.padding_free)
    return {
        "loss": float(loss.detach()),
        "stats": stats_as_floats(stats, where),
        "local": (entropy_sum, real, padded),
    }


def _grad_norm(params: list[torch.nn.Parameter], clip: float) -> float:
    norm = torch.nn.utils.clip_grad_norm_(params, clip)
    return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)


def sharded_update(policy: HFPolicy, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
    """`HFPolicy.update`'s pass over `batch` with `policy.model` sharded by `fsdp.shard`
    and `policy.optimizer` over its shards; every rank returns the same metrics."""
    error = half_precision_training_error(policy.options.dtype, policy.options.lr)
    if error:
        raise ValueError(f"{policy.name}: options {error}")
    encoded = _encode_prompts(policy, batch)
    params = [p for p in policy.model.parameters() if p.requires_grad]
    losses, norms, stats = [], [], []
    local = torch.zeros(3, dtype=torch.float64, device=policy.device)
    tokens = sequences_count = 0
    policy.model.train(policy.options.gradient_checkpointing)  # checkpointing needs train mode
    try:
        for number, indices in enumerate(batch.minibatches):
            where = f"{policy.name}: minibatch {number} of agent {batch.agent!r}"
            sequences = [batch.sequences[i] for i in indices]
            policy.optimizer.zero_grad(set_to_none=True)
            result = _minibatch(policy, encoded, sequences, loss_fn, where)
            if not math.isfinite(result["loss"]):
                raise FloatingPointError(f"{where}: loss is {result['loss']}; no step taken")
            norm = _grad_norm(params, policy.options.grad_clip)
            if not math.isfinite(norm):
                raise FloatingPointError(f"{where}: grad norm is {norm}; no step taken")
            policy.optimizer.step()
            losses.append(result["loss"])
            norms.append(norm)
            stats.append(result["stats"])
            local += torch.tensor(result["local"], dtype=torch.float64, device=policy.device)
            tokens += sum(len(seq.response_token_ids) for seq in sequences)
            sequences_count += len(sequences)
    finally:
        policy.model.eval()
    policy.optimizer.zero_grad(set_to_none=True)
    dist.all_reduce(local)  # gloo and nccl both reduce float64 sums
    entropy_sum, real, padded = local.tolist()
    metrics = pass_metrics(
        losses,
        norms,
        stats,
        entropy_sum=entropy_sum,
        tokens=tokens,
        sequences=sequences_count,
        real=int(real),
        padded=int(padded),
    )
    metrics["lr"] = float(policy.optimizer.param_groups[0]["lr"])
    return metrics


def first_minibatch_gradients(
    policy: HFPolicy, batch: TrainBatch, loss_fn: LossFn
) -> tuple[float, dict[str, torch.Tensor]]:
    """(pre-clip grad norm, full gradient per parameter name) of `batch`'s first minibatch
    at the current weights, on every rank; no step is taken and the gradients are cleared.
    For checking that k ranks compute the single-process gradient (the tests)."""
    sequences = [batch.sequences[i] for i in batch.minibatches[0]]
    policy.optimizer.zero_grad(set_to_none=True)
    policy.model.train(policy.options.gradient_checkpointing)
    try:
        _minibatch(policy, _encode_prompts(policy, batch), sequences, loss_fn, "gradients")
    finally:
        policy.model.eval()
    named = [(name, p) for name, p in policy.model.named_parameters() if p.grad is not None]
    norm = _grad_norm([p for _, p in named], math.inf)  # an infinite clip leaves them as they are
    full = {
        name: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).detach().clone()
        for name, p in named
    }
    policy.optimizer.zero_grad(set_to_none=True)
    return norm, full
