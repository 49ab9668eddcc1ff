"""The vLLM rollout backend: transformers trains, a vLLM engine samples.

`VLLMPolicy` is an `HFPolicy` (score, update, save and load are the transformers
code, unchanged) whose `generate` is served by a `engine.llm.VLLMEngine` (a `vllm.LLM`
built from the same weights). The engine's memory follows `engine.cycle`: with sleep
mode (CUDA) it sleeps right after each generate (level 1 here: the sync sends only the
blocks that changed, so the rest must survive the sleep), scoring and the update run with
it asleep, and the sync wakes its weights, the next generate its KV cache.
On `cuda:N` the engine's processes see only that GPU (`engine.llm.policy_gpu`, the
process's CUDA_VISIBLE_DEVICES entry N), where the staging buffer lives.

After every `update` and `load` the trainer's changed parameters are copied into the
engine in memory: `engine.staging.WeightStager` keeps one staging buffer the engine maps
once (a shared-memory file on CPU, device memory shared by a CUDA IPC handle on GPU, as
verl's `update_weights_from_ipc` does) and copies the changed tensors into it, cast to the
engine's dtype; `LLM.collective_rpc` calls `engine.worker.WeightSyncExtension`, mixed into
vLLM's worker, which runs the engine model's own `load_weights` on views of the buffer (it
maps the Hugging Face names onto fused qkv / gate-up parameters, as TRL's weight sync
relies on), synchronizes its device and reports any parameter left unset; then the prefix
cache is reset so no KV block computed with the old weights is reused. A decoder block is
sent whole if any of its tensors changed (`sync_group`), and tied duplicates once. On CPU
the load cannot be a plain in-place copy: vLLM repacks every linear weight for oneDNN and
frees the original, so each sent layer is reloaded and repacked.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from graft_env.policies.base import Generation, LossFn, SamplingParams
from graft_env.policies.engine.cycle import EngineCycle
from graft_env.policies.engine.llm import VLLMEngine, policy_gpu
from graft_env.policies.engine.memory import PhaseMemory
from graft_env.policies.engine.staging import WeightStager
from graft_env.policies.hf import HFPolicy
from graft_env.policies.loading import DTYPES
from graft_env.policies.options import HFPolicyOptions, VLLMEngineOptions
from graft_env.types import ScoredText, TrainBatch


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
        options = options or HFPolicyOptions()
        self.engine_options = engine_options or VLLMEngineOptions()
        tp = self.engine_options.tensor_parallel_size or 1
        gpu = policy_gpu(options.device, tp, os.environ)  # before the model loads
        super().__init__(model_path, name=name, options=options)
        self.engine = VLLMEngine(
            self,
            self.engine_options,
            tensor_parallel_size=tp,
            sleep_mode=self.engine_options.sleeps(self.device.type),
            visible_devices=gpu,
        )
        self.memory = PhaseMemory()
        self.cycle = EngineCycle(self.engine, self.memory.release)
        self.max_model_len: int = self.engine.max_model_len
        self.stager: WeightStager | None = None  # laid out by the first sync

    def sync_weights(self) -> tuple[int, int]:
        """Copy the trainer's changed parameters into the engine (through the staging
        buffer), cast to the engine's dtype (bfloat16 under mixed precision); return
        (tensors sent, tensors skipped as unchanged or tied). The engine's weights must be
        awake (`EngineCycle.sync` runs it)."""
        import torch

        state = self.model.state_dict()
        if self.stager is None or not self.stager.fits(state):
            self.stager = WeightStager(state, DTYPES[self.compute_dtype], self.device)
        slots, skipped = self.stager.stage(state)
        if slots:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # the engine reads the buffer next
            untouched = self.engine.load(self.stager.handles, slots)
            self.stager.unlink()  # the engine has it open
            if untouched:
                raise RuntimeError(
                    f"{self.name}: weight sync left engine parameters {untouched} unset; "
                    "the engine's model does not match the trained one"
                )
            self.engine.loaded()  # the workers keep the one buffer mapped
        return len(slots), skipped

    def close(self) -> None:
        """Stop the engine process now (it also stops when the policy is collected)."""
        if self.stager is not None:
            self.stager.unlink()
        self.engine.close()

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        with self.memory.phase("generate"):
            return self.cycle.generate(lambda: self.engine.generate(prompts, n, sampling))

    def score(
        self, prompts: Sequence[str], responses: Sequence[str], finish_reasons: Sequence[str]
    ) -> list[ScoredText]:
        self.cycle.asleep()  # scoring never runs beside the engine's KV cache
        with self.memory.phase("score"):
            return super().score(prompts, responses, finish_reasons)

    def update(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        self.cycle.asleep()
        with self.memory.phase("update"):
            metrics = super().update(batch, loss_fn)
        started = time.perf_counter()
        with self.memory.phase("sync"):
            self.cycle.sync(self.sync_weights)
        metrics["time/weight_sync"] = time.perf_counter() - started
        return {**metrics, **self.memory.metrics()}

    def load(self, path: str | Path) -> None:
        super().load(path)
        self.cycle.sync(self.sync_weights)
