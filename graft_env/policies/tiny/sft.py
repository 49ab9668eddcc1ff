"""Supervised warm-start: next-token NLL on worked solutions, prompts as context.

The loss runs through the same forward as RL training (`forward.response_logprobs`),
so the warm-started model is trained on exactly the layout it will later sample
and be scored in. Batches are length-bucketed (a pool of several batches is sorted
by length and cut into batches, served in random order) because on a 2-core CPU
padding is the largest avoidable cost.

With a `SkillMix` the examples are drawn skill by skill, with weights that a
callback resets during the run (the testbed's warm start to per-skill targets),
and the callback can stop the run early.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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
            yield from _served_pool(order[start : start + pool_size], examples, config, generator)


def _served_pool(
    pool: list[int], examples: Sequence[Example], config: SFTConfig, generator: torch.Generator
) -> Iterator[list[int]]:
    """`pool` sorted by target length, cut into batches and served in random order."""
    pool = sorted(pool, key=lambda i: len(examples[i][1]))
    batches = [pool[b : b + config.batch_size] for b in range(0, len(pool), config.batch_size)]
    for pick in torch.randperm(len(batches), generator=generator).tolist():
        yield batches[pick]


@dataclass(frozen=True)
class SkillMix:
    """Per-skill data weights that change during a warm start.

    skills: the skill of every example.
    every: steps between calls of `weights` (the first at step 0).
    weights(step): every skill's data weight from this step on (not all 0), or
        None to stop here. A new weight applies from the next pool of
        `bucket_batches` batches on (pools are drawn, then sorted by length).
    """

    skills: Sequence[str]
    every: int
    weights: Callable[[int], Mapping[str, float] | None]


def _weighted_batches(
    examples: Sequence[Example],
    skills: Sequence[str],
    weights: Mapping[str, float],
    config: SFTConfig,
    generator: torch.Generator,
) -> Iterator[list[int]]:
    """Like `_bucketed_batches`, but each pool draws its examples' skills by the current
    `weights` (read at every pool) and cycles through each skill's examples in a
    fresh random order."""
    names = sorted(set(skills))
    members = {name: [i for i, s in enumerate(skills) if s == name] for name in names}
    queues: dict[str, list[int]] = {name: [] for name in names}
    pool_size = config.batch_size * config.bucket_batches

    def take(name: str) -> int:
        if not queues[name]:
            order = torch.randperm(len(members[name]), generator=generator).tolist()
            queues[name] = [members[name][i] for i in reversed(order)]
        return queues[name].pop()

    while True:
        current = torch.tensor([float(weights.get(name, 0.0)) for name in names])
        if not current.sum() > 0:
            raise ValueError(f"SkillMix weights are all 0: {dict(weights)}")
        picks = torch.multinomial(current, pool_size, replacement=True, generator=generator)
        yield from _served_pool(
            [take(names[j]) for j in picks.tolist()], examples, config, generator
        )


def supervised_warm_start(
    model: torch.nn.Module,
    examples: Sequence[Example],
    pad_id: int,
    config: SFTConfig,
    progress: Callable[[int, float, float], None] | None = None,
    *,
    mix: SkillMix | None = None,
) -> list[float]:
    """Train `model` in place; returns the loss of every step run.

    `progress(step, loss, seconds_so_far)` is called every 50 steps and at the end.
    Without `mix` it runs exactly `config.steps` steps over `examples` in length
    buckets; with one, up to `config.steps`, drawing by the mix's weights.
    """
    pool_size = config.batch_size * config.bucket_batches
    if len(examples) < pool_size:
        raise ValueError(
            f"need at least batch_size * bucket_batches = {pool_size} examples, got {len(examples)}"
        )
    if any(not target for _, target in examples):
        raise ValueError("every SFT example needs a non-empty target")
    if mix is not None and len(mix.skills) != len(examples):
        raise ValueError(f"SkillMix has {len(mix.skills)} skills for {len(examples)} examples")
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    weights: dict[str, float] = {}  # the mix's current weights, read by its batches
    if mix is None:
        batches = _bucketed_batches(examples, config, generator)
    else:
        batches = _weighted_batches(examples, mix.skills, weights, config, generator)
    losses: list[float] = []
    started = time.perf_counter()
    model.train()
    for step in range(config.steps):
        if mix is not None and step % mix.every == 0:
            model.eval()
            update = mix.weights(step)
            model.train()
            if update is None:
                break
            weights.clear()
            weights.update(update)
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
