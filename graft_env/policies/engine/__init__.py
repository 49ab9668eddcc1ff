"""The vLLM rollout engine beside a trainer: its lifecycle, the weight transfer, its memory.

`graft_env.policies.vllm_policy` builds on these; nothing here imports vLLM at import time.

Modules:

cycle             the engine's memory lifecycle over one step, in one place
llm               `VLLMEngine`: a `vllm.LLM` serving a policy's model, its sleep, loads, rollouts
memory            GPU memory per phase of a step (allocated, reserved, peak); a no-op without CUDA
staging           the weight transfer's trainer side: staging buffers per GPU, slots
worker            the weight transfer's engine side: methods mixed into vLLM's worker
"""
