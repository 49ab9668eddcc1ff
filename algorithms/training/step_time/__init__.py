"""The parts of the step-time estimate (`algorithms.training.step_estimate`, whose docstring
holds the assumptions A1-A11 and composes these into one step): pure arithmetic, no torch.

Modules:

anchors           the GPUs' peaks, the H200 measurements and the rates they give (A3, A4, A6, A7)
gpu_memory        one GPU's bytes when FSDP2 shards an agent, and its vLLM engine's share (A5, A8)
phases            each phase's seconds for one agent (rollout, update, scoring, sync, ...)
table             the assumption lines and the per-phase table `graft plan` prints
totals            a step's phases, its totals with either rollout backend, and the target
workload          what is estimated: the length mix, one agent's step, the agent (A1, A2)
"""
