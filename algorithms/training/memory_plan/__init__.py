"""The memory plan of a run: what each policy holds on its device in each phase of a step,
from the model's transformers config and the run config alone (no torch, no weights). The
model of each term is in `terms`' docstring.

Modules:

architecture      a decoder's shape from its transformers config, or the paper models' table
attention         the mask, its copies (CUDA's padded one) and eager scores, by attn_implementation
device            one device's plan: its peak, the one-line refusal, the table `graft plan` prints
launch            what `graft plan` advises about the launch environment (allocator settings)
lifecycle         one GPU of a worker group per phase of verl's engine lifecycle (load to wake kv)
process           one GPU of a one-process vLLM agent through that lifecycle (whole-model staging)
reserves          contexts, NCCL, CUDA graphs, allocator slack: named figures with their sources
run               a run config's plans: agents' options and workload, their devices and plans
terms             the terms a policy holds per phase (weights, moments, KV, activations, logits)
"""

from algorithms.training.memory_plan.architecture import (
    MODEL_TYPES,
    PAPER_MODELS,
    Architecture,
    UnknownArchitecture,
    architecture_of,
    local_architecture,
    paper_architecture,
)
from algorithms.training.memory_plan.device import (
    DevicePlan,
    assumption_lines,
    format_plan,
)
from algorithms.training.memory_plan.launch import (
    ALLOCATOR_SETTING,
    ALLOCATOR_VAR,
    VLLM_EXPANDABLE_FIX,
    VLLM_FLOOR,
    allocator_advice,
)
from algorithms.training.memory_plan.reserves import RESERVE_BYTES
from algorithms.training.memory_plan.run import (
    LOADER_OPTIONS,
    agent_device,
    found_gpus,
    plan_run,
    policy_options,
    run_workload,
)
from algorithms.training.memory_plan.terms import (
    DTYPE_BYTES,
    GIB,
    LOGITS_COPIES,
    PHASES,
    PolicyPlan,
    Term,
    Workload,
    compute_bytes,
    kv_cache_bytes_per_token,
    layer_activation_bytes,
    plan_policy,
)

__all__ = [
    "ALLOCATOR_SETTING",
    "ALLOCATOR_VAR",
    "DTYPE_BYTES",
    "GIB",
    "LOADER_OPTIONS",
    "LOGITS_COPIES",
    "MODEL_TYPES",
    "PAPER_MODELS",
    "PHASES",
    "RESERVE_BYTES",
    "VLLM_EXPANDABLE_FIX",
    "VLLM_FLOOR",
    "Architecture",
    "DevicePlan",
    "PolicyPlan",
    "Term",
    "UnknownArchitecture",
    "Workload",
    "agent_device",
    "allocator_advice",
    "architecture_of",
    "assumption_lines",
    "compute_bytes",
    "format_plan",
    "found_gpus",
    "kv_cache_bytes_per_token",
    "layer_activation_bytes",
    "local_architecture",
    "paper_architecture",
    "plan_policy",
    "plan_run",
    "policy_options",
    "run_workload",
]
