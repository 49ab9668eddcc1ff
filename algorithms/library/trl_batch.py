"""The rows of TRL's generation batch under graft-library (`trl_adapter`): a transferred
group's peer responses written over its receiver rows, and the rows put in minibatch order;
activation checkpointing switched off around the peer rows' scoring; and TRL's prompt sampler
made resumable (`EpochSampler`).

A peer row holds the peer's tokens (re-tokenised by the receiver), the receiver's scoring as
its old (and sampler) log-probs, so the sampler ratio is 1, and its weighted advantage a w;
a removed response (w = 0), and with `mask_truncated` one its source cut at its token
limit, is masked out with advantage 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from trl.trainer.utils import RepeatSampler

from graft_env.types import TransferredGroup

PER_TOKEN = ("old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps")


def with_peer_rows(
    batch: dict[str, Any],
    transfers: Sequence[TransferredGroup],
    truncated: Sequence[Sequence[bool]],
    n: int,
    pad_token_id: int,
    mask_truncated: bool,
    reference: Sequence[torch.Tensor] | None,
) -> dict[str, Any]:
    """The batch (groups of `n` rows) with each transferred group's rows holding its peer
    responses; `truncated[j][i]`: whether the source cut response i of group j at its token
    limit; `reference`: TRL's reference log-probs of the peer rows, in transfer order (None:
    the batch has none). Every row's weight is `graft_weight`, `graft_peer` marks peer
    rows."""
    rows = batch["completion_ids"].size(0)
    device = batch["completion_ids"].device
    peer_rows = [(g, i) for g in transfers for i in range(n)]
    row_of = [g.prompt_index * n + i for g, i in peer_rows]
    ids = [g.scored[i].token_ids for g, i in peer_rows]
    width = max([batch["completion_ids"].size(1), *map(len, ids)])
    out = dict(batch)
    out["completion_ids"] = _widen(batch["completion_ids"], width, pad_token_id)
    for key in ("completion_mask", "tool_mask", *PER_TOKEN):
        if key in batch:
            out[key] = _widen(batch[key], width, 1 if key == "tool_mask" else 0)
    ratio = batch.get("importance_sampling_ratio")
    if ratio is not None and ratio.size(1) > 1:  # token-level (B, T); sequence level is (B, 1)
        out["importance_sampling_ratio"] = _widen(ratio, width, 0)
    out["advantages"] = batch["advantages"].clone()
    out["graft_weight"] = torch.ones(rows, device=device)
    out["graft_peer"] = torch.zeros(rows, dtype=torch.bool, device=device)
    for j, ((group, i), row) in enumerate(zip(peer_rows, row_of, strict=True)):
        length, weight = len(ids[j]), float(group.weights[i])
        keep = weight > 0 and not (mask_truncated and truncated[j // n][i])
        logps = torch.as_tensor(group.scored[i].logprobs, device=device)
        out["completion_ids"][row] = pad_token_id
        out["completion_ids"][row, :length] = torch.tensor(ids[j], device=device)
        out["completion_mask"][row] = 0
        out["completion_mask"][row, :length] = int(keep)
        for key in ("old_per_token_logps", "sampling_per_token_logps"):
            if key in out:  # sampled by another model: the sampler ratio is 1
                out[key][row] = 0.0
                out[key][row, :length] = logps.to(out[key].dtype)
        if reference is not None:
            out["ref_per_token_logps"][row] = 0.0
            out["ref_per_token_logps"][row, :length] = reference[j][:length].to(device)
        if "tool_mask" in out:
            out["tool_mask"][row] = 1
        if "importance_sampling_ratio" in out:
            out["importance_sampling_ratio"][row] = 1.0
        out["advantages"][row] = float(group.advantages[i]) * weight if keep else 0.0
        out["graft_weight"][row] = weight
        out["graft_peer"][row] = True
    return out


def _widen(tensor: torch.Tensor, width: int, value: float) -> torch.Tensor:
    """`tensor` [B, T] right-padded with `value` to [B, width] (a copy)."""
    extra = width - tensor.size(1)
    return torch.nn.functional.pad(tensor, (0, extra), value=value) if extra else tensor.clone()


def in_order(value: Any, order: torch.Tensor) -> Any:
    """A batch entry with its rows in `order` (TRL's shuffle_sequence_dict, not random)."""
    if isinstance(value, torch.Tensor) and value.ndim >= 1:
        return value[order.to(value.device)]
    return value


@contextlib.contextmanager
def checkpointing_off(model: Any, kwargs: dict[str, Any] | None) -> Iterator[None]:
    """Activation checkpointing off for a no-grad forward, restored with `kwargs` after: TRL's
    `disable_gradient_checkpointing`, under the names transformers >= 5.24 keeps (its
    `is_gradient_checkpointing` / `gradient_checkpointing_*` aliases warn, removed in v6)."""
    new = hasattr(model, "is_activation_checkpointing")
    was_on = model.is_activation_checkpointing if new else model.is_gradient_checkpointing
    if was_on:
        (model.activation_checkpointing_disable if new else model.gradient_checkpointing_disable)()
    try:
        yield
    finally:
        if was_on:
            (model.activation_checkpointing_enable if new else model.gradient_checkpointing_enable)(
                kwargs
            )


class EpochSampler(RepeatSampler):
    """TRL's `RepeatSampler` whose order in epoch e is drawn from (seed, e) alone.

    TRL's draws each epoch's order from one generator seeded once, so a run resumed from a
    checkpoint restarts that sequence and answers other prompts than the run it continues
    (and than its live peers, which then refuse its step). The trainer calls `set_epoch`
    before every epoch, fresh or resumed (accelerate forwards it to the sampler)."""

    def __init__(self, sampler: RepeatSampler) -> None:
        super().__init__(
            sampler.data_source,
            sampler.mini_repeat_count,
            sampler.batch_size,
            sampler.repeat_count,
            sampler.shuffle,
            sampler.seed,
        )

    def set_epoch(self, epoch: int) -> None:
        if self.shuffle:
            seed = 0 if self.seed is None else self.seed
            state = np.random.SeedSequence([seed, epoch]).generate_state(1, dtype=np.uint64)[0]
            self.generator.manual_seed(int(state))
