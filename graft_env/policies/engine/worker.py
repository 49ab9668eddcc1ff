"""The engine's side of the weight transfer: methods vLLM mixes into its worker class.

`WeightSyncExtension` is passed to `vllm.LLM(worker_extension_cls=...)` and runs in each of
the engine's worker processes (one per tensor-parallel GPU); `LLM.collective_rpc(name,
args=...)` calls its methods on every worker and returns when all have returned.

A load's acknowledgement is that return, so it must mean "the copy is done":
`receive_slots` loads the slots' views of this worker's own staging buffer, then
synchronizes the device before returning. Without the synchronize, the copies out of the
buffer can still be queued on the device when the trainer writes the next sync's tensors into
it, and those bytes land in this sync's parameters. The anchors: verl's
`vLLMColocateWorkerExtension.update_weights_from_ipc` (`synchronize()`, then acknowledge) and
vLLM's own `Worker.update_weights` (`torch.accelerator.synchronize()` after
`receive_weights`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch

from graft_env.policies.engine.staging import BufferHandles, WeightSlot, open_buffer, slot_view

LoadWeights = Callable[[Iterable[tuple[str, torch.Tensor]]], Iterable[str]]


def receive_slots(
    buffer: torch.Tensor,
    slots: Sequence[WeightSlot],
    load_weights: LoadWeights,
    synchronize: Callable[[], None],
) -> set[str]:
    """Load `slots` of `buffer` with `load_weights`; return the names it loaded, only once
    `synchronize()` says every copy out of the buffer is done (the acknowledgement)."""
    loaded = set(load_weights([(slot[0], slot_view(buffer, slot)) for slot in slots]))
    synchronize()
    return loaded


def _reprocess_tied(model: torch.nn.Module, loaded: set[str]) -> list[str]:
    """Re-run the post-load processing of modules that share a reloaded weight but were
    not loaded themselves: a tied output head (SmolLM2, SmolLM3, Qwen3). On CPU vLLM
    prepacks the head's GEMM from the weight at load (`cpu_linear`), and the layerwise
    reload refreshes only the embedding that received the tensor, so the head would keep
    sampling from the old weights (seen: log-probs 0.1 off after one SmolLM2 update).
    Returns the modules reprocessed."""
    params = dict(model.named_parameters(remove_duplicate=False))
    pointers = {params[name].data_ptr() for name in loaded if name in params}
    done = []
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        method = getattr(module, "quant_method", None)
        if not isinstance(weight, torch.Tensor) or not hasattr(module, "cpu_linear"):
            continue
        if f"{name}.weight" in loaded or weight.data_ptr() not in pointers or method is None:
            continue
        method.process_weights_after_loading(module)
        done.append(name)
    return done


def _synchronize(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None  # CPU copies are done when they return


class WeightSyncExtension:
    """Methods vLLM mixes into its worker class (in the engine's worker processes);
    `self` is the vLLM worker."""

    def graft_load_weights(self, handles: BufferHandles, slots: Sequence[WeightSlot]) -> list[str]:
        """Reload the tensors `slots` point at in this worker's staging buffer (`handles`
        by device, `engine.staging.open_buffer`) and return, once the copies are done, the
        engine parameters no sync has set yet (each sync may send only what changed).

        The steps of vLLM's `reload_weights` (checkpoint format), kept here to learn
        which parameters were loaded: its layerwise reload re-runs each layer's
        post-load processing, which the CPU build needs (it repacks linear weights
        for oneDNN and frees the originals, so a bare `load_weights` fails).
        """
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        device = torch.device(getattr(self, "device", None) or "cpu")
        if getattr(self, "graft_handles", None) != handles:  # opened once per buffer
            self.graft_buffer = open_buffer(handles, device)
            self.graft_handles = handles
        model = self.get_model()
        expected = {name for name, _ in model.named_parameters()}

        def load(tensors: Iterable[tuple[str, torch.Tensor]]) -> Iterable[str]:
            with set_current_vllm_config(self.vllm_config):
                initialize_layerwise_reload(model)
                loaded = model.load_weights(tensors)
                finalize_layerwise_reload(model, self.vllm_config.model_config)
            return loaded

        # It warns "Failed to load weights" for every layer not sent, which is every
        # unchanged one here; a parameter never set is reported below instead.
        reload_log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
        level = reload_log.level
        reload_log.setLevel(logging.ERROR)
        try:
            buffer = self.graft_buffer
            loaded = receive_slots(buffer, slots, load, _synchronize(device))
        finally:
            reload_log.setLevel(level)
        _reprocess_tied(model, loaded)
        self.graft_loaded = getattr(self, "graft_loaded", set()) | loaded
        return sorted(expected - self.graft_loaded)

    def graft_scale_logits(self, factor: float) -> int:
        """Multiply the model's logits by `factor`; return how many layers did it."""
        from vllm.model_executor.layers.logits_processor import LogitsProcessor

        layers = [m for m in self.get_model().modules() if isinstance(m, LogitsProcessor)]
        for layer in layers:
            layer.scale *= factor
        return len(layers)

    def graft_seed(self, seed: int) -> int:
        """Seed this worker's generators (torch, on every device, numpy, random): the
        engine's sampler draws from them for requests without a seed of their own."""
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
        return seed
