"""Decoding with oneDNN GEMMs on prepacked weights (the `packed_decode` option, CPU only).

At the 32 rows a decode step multiplies, `nn.Linear`'s aten GEMM ran SmolLM2-135M's
linear layers at 70-95 GFLOP/s on this machine's two AVX-512 cores; the same GEMMs on
weights reordered once into oneDNN's blocked layout (`torch.ops.mkldnn`, what inductor's
CPU freezing and vLLM-cpu use) at 167-237 GFLOP/s (`benchmarks.perf.policy_throughput
--levers packed`). The packed weights are a second copy of every linear weight, made on
the first generation after the weights change: each pack remembers its weight tensor
(a weak reference) and that tensor's in-place version counter, which the optimizer step
and `load_state_dict` advance, and `HFPolicy.load` builds new tensors, so a trained or
reloaded policy never decodes with stale weights (repacking SmolLM2-135M takes about
0.3 s, once per update). Writes through `.data` bypass the version counter; nothing here
makes them. oneDNN rounds differently from aten: recorded log-probs move by up to ~5e-5
from the aten path's (vLLM's are 5-8e-6 off the training forward's); after a near-tie a
row draws another token, finishes at another step and so changes which uniform every
later row draws (17 of 32 SmolLM2 rows kept their tokens over 128). So the option is off
by default and every shipped result was sampled without it.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator

import torch


class PackedWeights:
    """oneDNN-packed copies of a model's `nn.Linear` weights, repacked when one changes."""

    def __init__(self) -> None:
        self._packs: dict[str, tuple[weakref.ref, int, torch.Tensor]] = {}
        self._in_use = threading.Lock()

    def __len__(self) -> int:
        return len(self._packs)

    def packed(self, name: str, weight: torch.Tensor) -> torch.Tensor:
        """The packed form of `weight` (the module `name`'s), packed again if it changed."""
        entry = self._packs.get(name)
        if entry is None or entry[0]() is not weight or entry[1] != weight._version:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
            entry = (weakref.ref(weight), weight._version, packed)
            self._packs[name] = entry
        return entry[2]

    @contextlib.contextmanager
    def applied(self, model: torch.nn.Module) -> Iterator[None]:
        """`model` with its plain `nn.Linear` layers on their packed weights, restored after.

        Inference only: the oneDNN op has no backward, so it refuses to run with grad on.
        One use at a time: a second, nested or concurrent, is refused rather than letting
        either one unpatch the other's layers.
        """
        if torch.is_grad_enabled():
            raise RuntimeError("packed_decode runs without gradients (inside torch.no_grad)")
        linears = [  # a layer with its own instance forward (a hook's) keeps it
            (n, m)
            for n, m in model.named_modules()
            if type(m) is torch.nn.Linear and "forward" not in m.__dict__
        ]
        if not self._in_use.acquire(blocking=False):
            raise RuntimeError("packed_decode: the packed kernels are already in use")
        try:
            for name, module in linears:
                module.forward = self._forward(name, module)
            yield
        finally:
            for _, module in linears:
                module.__dict__.pop("forward", None)
            self._in_use.release()

    def _forward(
        self, name: str, module: torch.nn.Linear
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        def forward(x: torch.Tensor) -> torch.Tensor:
            weight = self.packed(name, module.weight)
            return torch.ops.mkldnn._linear_pointwise(x, weight, module.bias, "none", [], "")

        return forward
