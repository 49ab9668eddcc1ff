"""Attention's [L, L] tensors measured against the memory plan's attention terms
(`memory_plan.attention`) on a tiny random Qwen3 (from its config class, no download), through
the project's forward (`forward.response_logprobs`): two rows of unequal lengths padded to L
with a padding mask, or two of equal lengths packed (`padding_free`, one row of N tokens).

Two measures, both structural (shapes x dtypes: the same on every machine of a device type):

- `saved`: per layer, the bytes of [L, L] tensors autograd saves for backward
  (`saved_tensors_hooks`), in an update without gradient checkpointing;
- `peak`: the most bytes of [L, L] tensors alive at once over the forward (and backward of an
  update), op by op: a TorchDispatchMode keeps a weak reference to each output's storage. It
  sees what the ops hold, not a kernel's internal buffers (such as the CPU's float32 temporary
  of a mixed-dtype add under autocast, which the plan counts as a bound).

On CPU torch's SDPA runs its flash kernel with the additive mask. On CUDA a masked call goes to
the memory-efficient kernel, which pads a mask of L (or N) not a multiple of 8 into one more
copy (the plan's `ALIGNMENT_COPY`, compared on CUDA only), or to the math path, which would
hold more: `gpu_probes` (c) runs `compare` on the GPU, at L = 47 / N = 94 too, to record which.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from algorithms.training.memory_plan import Architecture, Workload, compute_bytes, plan_policy
from algorithms.training.memory_plan.attention import (
    ALIGNMENT_COPY,
    mask_columns,
    saved_per_layer,
)
from benchmarks.perf.random_models import TOY_QWEN3
from graft_env.policies.options import HFPolicyOptions

TINY_QWEN3 = {**TOY_QWEN3, "vocab_size": 128}
"""`TOY_QWEN3` with a smaller vocabulary: no dimension equals L (48, 47) or N (96, 94), so
[L, L] shapes are attention's alone."""
LENGTHS = {  # (packed, aligned): prompt and response lengths of the two rows
    (False, True): ((20, 14), (28, 22)),  # L = 48, the second row padded
    (True, True): ((20, 20), (28, 28)),  # N = 96 real tokens, no padding (the plan's longest rows)
    (False, False): ((20, 14), (27, 22)),  # L = 47: not a multiple of 8
    (True, False): ((20, 20), (27, 27)),  # N = 94: not a multiple of 8
}
PRECISIONS = {
    "float32": ("float32", None),
    "autocast": ("float32", "bfloat16"),
    "bfloat16": ("bfloat16", None),
}
ATTENTION_TERMS = ("attention mask", ALIGNMENT_COPY, "eager attention scores")
"""The plan's attention terms; only CUDA holds `ALIGNMENT_COPY`'s (its `cuda_only`)."""


@dataclass(frozen=True)
class Case:
    """One forward (phase "score") or forward + backward ("update") of the tiny model."""

    implementation: str  # "sdpa" or "eager"
    precision: str  # a key of PRECISIONS
    phase: str  # "score" or "update"
    packed: bool = False
    checkpointing: bool = False
    aligned: bool = True  # L (or N) a multiple of 8

    def options(self) -> HFPolicyOptions:
        dtype, autocast = PRECISIONS[self.precision]
        return HFPolicyOptions(
            dtype=dtype,
            autocast=autocast,
            attn_implementation=self.implementation,
            gradient_checkpointing=self.checkpointing,
            padding_free=self.packed,
            micro_batch_size=2,
            score_batch_size=2,
        )

    @property
    def lengths(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return LENGTHS[self.packed, self.aligned]

    @property
    def side(self) -> int:
        """L of the [L, L] tensors: the padded row's length, or the packed row's."""
        prompts, responses = self.lengths
        return sum(prompts) + sum(responses) if self.packed else max(prompts) + max(responses)


class _SquareTensors(TorchDispatchMode):
    """The peak bytes of [side, side]-shaped storages alive at once, op by op."""

    def __init__(self, side: int) -> None:
        super().__init__()
        self.side, self.live, self.bytes, self.peak = side, {}, 0, 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        for key in [key for key, (ref, _) in self.live.items() if ref.expired()]:
            self.bytes -= self.live.pop(key)[1]
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and _square(tensor, self.side):
                storage = tensor.untyped_storage()
                if storage.data_ptr() not in self.live:
                    self.live[storage.data_ptr()] = (StorageWeakRef(storage), storage.nbytes())
                    self.bytes += storage.nbytes()
                    self.peak = max(self.peak, self.bytes)
        return out


def _square(tensor: torch.Tensor, side: int) -> bool:
    return tensor.dim() >= 2 and tuple(tensor.shape[-2:]) == (side, side)


def tiny_model(case: Case, device: str) -> torch.nn.Module:
    """The tiny Qwen3 as `load_model` leaves it under `case.options()`, in train mode under
    gradient checkpointing (as `HFPolicy.update` sets it)."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    from graft_env.policies.loading import enable_checkpointing

    torch.manual_seed(0)
    config = Qwen3Config(**TINY_QWEN3, attn_implementation=case.implementation)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, case.options().dtype))
    if case.checkpointing:
        enable_checkpointing(model)
    return model.to(device).train(case.checkpointing)


def measure(case: Case, device: str = "cpu") -> dict[str, Any]:
    """`peak` bytes of [L, L] tensors alive at once, and `saved` bytes per layer (an update
    without checkpointing; else empty)."""
    from graft_env.policies.forward import response_logprobs

    model, update = tiny_model(case, device), case.phase == "update"
    generator = torch.Generator().manual_seed(0)
    prompts, responses = (
        [torch.randint(3, TINY_QWEN3["vocab_size"], (n,), generator=generator).tolist() for n in ns]
        for ns in case.lengths
    )
    layer, saved = [0], {}
    for index, decoder in enumerate(model.model.layers):
        decoder.register_forward_pre_hook(lambda *_, i=index: layer.__setitem__(0, i))

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if _square(tensor, case.side):
            storage = tensor.untyped_storage()
            saved.setdefault(layer[0], {})[storage.data_ptr()] = storage.nbytes()
        return tensor

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)
    autocast = (
        torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
        if case.options().autocast
        else contextlib.nullcontext()
    )
    with _SquareTensors(case.side) as tracker, hooks, torch.set_grad_enabled(update):
        with autocast:
            result = response_logprobs(
                model, prompts, responses, pad_id=0, temperature=1.0, padding_free=case.packed
            )
        if update:
            (-result.logprobs.sum()).backward()
    per_layer = [sum(saved.get(i, {}).values()) for i in range(len(model.model.layers))]
    return {"peak": tracker.peak, "saved": [] if case.checkpointing else per_layer}


def planned(case: Case, device: str = "cpu") -> dict[str, float]:
    """The plan's attention terms for `case`'s phase and shape that `device` holds (`peak`:
    `ALIGNMENT_COPY` on CUDA only), that term alone (`alignment_copy`), and the bytes one
    layer saves for backward (`saved_per_layer`)."""
    from transformers import Qwen3Config

    arch = Architecture.from_config(Qwen3Config(**TINY_QWEN3).to_dict())
    options = case.options()
    prompts, responses = case.lengths
    work = Workload(max(prompts), max(responses), len(prompts))
    terms = plan_policy(arch, options, work).phases[case.phase]
    cuda = device.startswith("cuda")
    held = [t for t in terms if t.name in ATTENTION_TERMS and (cuda or not t.cuda_only)]
    tokens = len(prompts) * work.row_tokens
    entries = tokens * mask_columns(tokens, work.row_tokens, case.packed)
    return {
        "peak": sum(term.bytes for term in held),
        "alignment_copy": sum(term.bytes for term in terms if term.name == ALIGNMENT_COPY),
        "saved_per_layer": saved_per_layer(arch, options, compute_bytes(options)) * entries,
    }


def cases() -> list[Case]:
    """sdpa and eager in each precision, padded and packed, scoring and update with and without
    checkpointing, at L = 48 / N = 96; and sdpa's again at L = 47 / N = 94, which CUDA's
    memory-efficient kernel pads (`ALIGNMENT_COPY`)."""
    phases = (("score", False), ("update", False), ("update", True))
    return [
        Case(implementation, precision, phase, packed, checkpointing, aligned)
        for aligned, implementations in ((True, ("sdpa", "eager")), (False, ("sdpa",)))
        for implementation in implementations
        for precision in PRECISIONS
        for packed in (False, True)
        for phase, checkpointing in phases
    ]


def compare(device: str, chosen: list[Case] | None = None) -> list[dict[str, Any]]:
    """Measured against planned on `device` for the `chosen` cases (default: every one of
    `cases()`, what `gpu_probes` (c) records). On CUDA an unaligned case's `saved` copies are
    the padded ones: wider than `saved_per_layer` by the padding columns."""
    return [
        {**asdict(case), **measure(case, device), "planned": planned(case, device)}
        for case in (cases() if chosen is None else chosen)
    ]
