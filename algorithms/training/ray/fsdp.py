"""FSDP2 on one rank of a worker group: shard a transformers model, and gather it whole.

`shard` applies `torch.distributed.fsdp.fully_shard` to every decoder layer (the classes
the model names in `_no_split_modules`, as accelerate and TRL choose them) and then to
the root, with `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` on CUDA and
full precision on CPU. Gradients are summed over ranks, not averaged
(`set_gradient_divide_factor(1.0)`, as plain SUM reductions, which gloo and NCCL both
have): the update back-propagates each rank's share of
the whole minibatch's loss, so the sum is the single-process gradient.

The policy's forwards run the model's body and head apart (`policies.logprobs.split_head`),
never the root's own `forward`, so the root's FSDP hooks (lazy initialisation, unsharding
the embeddings, final norm and head, reduce-scattering their gradients) would never run:
`in_root(model, fn, ...)` runs `fn` inside them (`register_fsdp_forward_method`, the way
FSDP2 wraps `generate`). Every use of a sharded model goes through it.

Sampling and scoring run a different number of forwards on each rank (responses end at
different steps), which FSDP's per-forward all-gathers cannot follow: `gathered` unshards
every FSDP module once (one collective on every rank) and keeps it whole until it exits.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch
from torch.distributed.fsdp import (
    FSDPModule,
    MixedPrecisionPolicy,
    fully_shard,
    register_fsdp_forward_method,
)

from graft_env.policies import HFPolicy, load_policy

ROOT_METHOD = "graft_in_root"
T = TypeVar("T")


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks: modules whose class is in `model._no_split_modules`."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [module for module in model.modules() if type(module).__name__ in names]
    if not layers:
        raise ValueError(
            f"{type(model).__name__}: no decoder layers to shard (_no_split_modules is "
            f"{sorted(names)})"
        )
    return layers


def mixed_precision(device: torch.device) -> MixedPrecisionPolicy:
    """bf16 parameters with fp32 gradient reduction on CUDA; full precision elsewhere."""
    if device.type == "cuda":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def shard(model: torch.nn.Module, device: torch.device) -> FSDPModule:
    """`fully_shard` per decoder layer, then the root; gradients summed over ranks."""
    policy = mixed_precision(device)
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    for module in fsdp_modules(model):
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
    setattr(model, ROOT_METHOD, _call)  # an instance attribute: called as _call(fn, ...)
    register_fsdp_forward_method(model, ROOT_METHOD)
    return model


def sharded_policy(model: str, options: Mapping[str, Any]) -> HFPolicy:
    """A rank's policy: `load_policy(model, **options)`, which must be a transformers policy,
    sharded (`shard`) and given an AdamW over its shards (the process group already joined).
    Shared by `rank.RankWorker.setup` and the Ray-free device check.

    The full copy is loaded into CPU memory, never onto the GPU: `fully_shard` moves each
    decoder layer to the device mesh's GPU as it shards it and frees the full layer, so a
    rank's GPU holds its shards plus at most one whole layer while loading (the order
    verl's `_build_model_optimizer` keeps: load on CPU, wrap with FSDP on the device)."""
    device = torch.device(options.get("device", "cpu"))
    policy = load_policy(model, **{**options, "device": "cpu"})
    if type(policy) is not HFPolicy:
        raise ValueError(
            f"a worker group shards a transformers policy; {model!r} loads as "
            f"{type(policy).__name__}"
        )
    policy.device = device  # where it computes once sharded (the mesh's device)
    policy.options = dataclasses.replace(policy.options, device=str(device))
    shard(policy.model, device)
    policy.optimizer = torch.optim.AdamW(
        policy.model.parameters(),
        lr=policy.options.lr,
        betas=policy.options.betas,
        weight_decay=policy.options.weight_decay,
    )
    return policy


def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return fn(*args, **kwargs)


def in_root(model: torch.nn.Module, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` as if it were the sharded `model`'s forward: inside the FSDP
    root's pre- and post-forward hooks (root parameters unsharded, gradients reduced)."""
    return getattr(model, ROOT_METHOD)(fn, *args, **kwargs)


def fsdp_modules(model: torch.nn.Module) -> list[FSDPModule]:
    return [module for module in model.modules() if isinstance(module, FSDPModule)]


@contextlib.contextmanager
def gathered(model: torch.nn.Module) -> Iterator[None]:
    """Every FSDP module unsharded (one all-gather each, on every rank) until exit, so
    forwards inside run no collective; resharded after."""
    modules = fsdp_modules(model)

    def unshard_all() -> None:
        for module in modules:
            module.unshard()
            module.set_reshard_after_forward(False, recurse=False)

    in_root(model, unshard_all)  # the root's state initialises before any layer's
    try:
        yield
    finally:
        for module in modules:
            module.set_reshard_after_forward(True, recurse=False)
            module.reshard()
