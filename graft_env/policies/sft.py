"""Supervised warm-start: next-token NLL on worked solutions, prompts as context.

The loss runs through the same forward as RL training (`forward.response_logprobs`),
so the warm-started model is trained on exactly the layout it will later sample
and be scored in. Batches are length-bucketed (a pool of several batches is sorted
by length and cut into batches, served in random order) because on a 2-core CPU
padding is the largest avoidable cost.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from graft_env.policies.forward import response_logprobs

Example = tuple[list[int], list[int]]  # (prompt token ids, target token ids ending in EOS)


@dataclass(frozen=True)
class SFTConfig:
    """Optimisation settings of the warm-start.

    steps, batch_size: optimiser steps and sequences per step.
    lr, warmup_steps: AdamW peak learning rate after a linear warm-up; it then
        decays on a cosine to `final_lr_fraction * lr`.
    weight_decay, grad_clip: AdamW weight decay and max global grad norm.
    bucket_batches: batches pooled and sorted by length together.
    seed: the batch order.
    """

    steps: int = 1000
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 50
    final_lr_fraction: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    bucket_batches: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "bucket_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"SFTConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0 or not 0 <= self.final_lr_fraction <= 1:
            raise ValueError(f"SFTConfig needs lr > 0 and final_lr_fraction in [0, 1]: {self}")

    def lr_at(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(1, self.steps - self.warmup_steps)
        cosine = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
        return self.lr * (self.final_lr_fraction + (1 - self.final_lr_fraction) * cosine)


def _bucketed_batches(
    examples: Sequence[Example], config: SFTConfig, generator: torch.Generator
) -> Iterator[list[int]]:
    """Endless stream of index batches with similar lengths inside each batch."""
    pool_size = config.batch_size * config.bucket_batches
    while True:
        order = torch.randperm(len(examples), generator=generator).tolist()
        for start in range(0, len(order) - pool_size + 1, pool_size):
            pool = sorted(order[start : start + pool_size], key=lambda i: len(examples[i][1]))
            batches = [
                pool[b : b + config.batch_size] for b in range(0, pool_size, config.batch_size)
            ]
            for pick in torch.randperm(len(batches), generator=generator).tolist():
                yield batches[pick]


def supervised_warm_start(
    model: torch.nn.Module,
    examples: Sequence[Example],
    pad_id: int,
    config: SFTConfig,
    progress: Callable[[int, float, float], None] | None = None,
) -> list[float]:
    """Train `model` in place; returns the loss of every step.

    `progress(step, loss, seconds_so_far)` is called every 50 steps and at the end.
    """
    pool_size = config.batch_size * config.bucket_batches
    if len(examples) < pool_size:
        raise ValueError(
            f"need at least batch_size * bucket_batches = {pool_size} examples, got {len(examples)}"
        )
    if any(not target for _, target in examples):
        raise ValueError("every SFT example needs a non-empty target")
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    batches = _bucketed_batches(examples, config, generator)
    losses: list[float] = []
    started = time.perf_counter()
    model.train()
    for step in range(config.steps):
        for group in optimizer.param_groups:
            group["lr"] = config.lr_at(step)
        batch = [examples[i] for i in next(batches)]
        result = response_logprobs(
            model,
            [prompt for prompt, _ in batch],
            [target for _, target in batch],
            pad_id=pad_id,
            temperature=1.0,
            with_entropy=False,
        )
        loss = -result.logprobs.sum() / result.mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        losses.append(float(loss.detach()))
        if progress is not None and (step % 50 == 0 or step == config.steps - 1):
            progress(step, losses[-1], time.perf_counter() - started)
    model.eval()
    return losses
