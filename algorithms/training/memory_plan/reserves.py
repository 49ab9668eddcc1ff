"""What a GPU holds beyond the tensors a plan counts: each figure a named constant with its
source. docs/results/gpu_check_h200 measured none of them (its gpu.txt has the total only), so
each is a public figure, rounded up; `benchmarks/perf/` probes are where they get measured.
"""

from __future__ import annotations

from algorithms.training.memory_plan.terms import GIB

CUDA_CONTEXT_BYTES = 0.5 * GIB
"""One process's CUDA context on one GPU (driver state and the kernels loaded so far). With lazy
module loading (CUDA >= 11.7, PyTorch's default) "around 400MB" (pytorch/pytorch#109888) or
"~300MB" (#107667); 426 MiB on an RTX 6000 Ada under torch 2.10 (unslothai/unsloth-zoo#1053);
a process that loads more kernels holds more (616 MiB, LMCache/LMCache#4019)."""

ALLOCATOR_SLACK_BYTES = 1.5 * GIB
"""cuBLAS workspaces and the caching allocator's fragmentation (blocks split by variable-length
micro-batches that `empty_cache` cannot return): not measured; with one context this is the
2 GiB reserve the plan has always kept back per GPU."""

RESERVE_BYTES = CUDA_CONTEXT_BYTES + ALLOCATOR_SLACK_BYTES
"""Kept back on every GPU: the first process's context and the allocator's slack."""

NCCL_COMMUNICATOR_BYTES = 1.0 * GIB
"""One NCCL communicator's buffers on one GPU: 544 MB for a 2-GPU group over NVLink on A100s
after one all-reduce (NVIDIA/nccl#964); it grows with the channels NCCL opens to reach a link's
bandwidth, more on H100 than on A100 (NVIDIA/nccl#864 and #986: "linearly tied to the number
of channels"), so 1 GiB. Counted once per process group used on the GPU: the trainer's FSDP2
group, and the engine's tensor-parallel group when TP > 1 (vLLM's custom all-reduce buffers,
a few MiB, fall in the slack)."""

CUDA_GRAPH_POOL_BYTES = 1.0 * GIB
"""vLLM's CUDA-graph memory pool per GPU (`vllm_enforce_eager: false`), outside its
`gpu_memory_utilization` share and kept while the engine sleeps: vLLM #11743 left 0.93 of
79.22 GiB in use after sleep ("cudagraph memory pool is not released", with the context) for a
model of 2.32 GiB of weights; vLLM #56373: level-1 sleep "leaves graph executables and native
CUDA graph pools resident"; vLLM #47654 reports 1.40 GiB captured per rank for a far wider
model (Kimi-K2.6 at TP 8)."""

VLLM_WORKSPACE_BYTES = 2 * GIB
"""The engine's activations while it generates, inside its `gpu_memory_utilization` share
(vLLM's profile run sizes them; step estimate A5)."""
