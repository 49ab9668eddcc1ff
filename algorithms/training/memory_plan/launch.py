"""What `graft plan` advises about the launch environment: the CUDA caching allocator's
expandable segments, which variable-length micro-batches want and vLLM agents must not have.

Expandable segments let the allocator grow a segment instead of splitting fixed ones, so the
micro-batches' varying sizes fragment it less. With a vLLM agent they are not advised:

- vLLM's sleep mode (`CuMemAllocator`) asserted against `expandable_segments:True` at engine
  start from vllm-project/vllm#14189 (2025-03) until #40812 (merged 2026-04-24) switched them
  off around its memory pool instead: `VLLM_EXPANDABLE_FIX`, the first release with it;
- the weight sync shares its staging buffer with the engine's workers through a CUDA IPC
  handle, and an expandable segment's handle is exported through `pidfd_getfd`, which
  unprivileged containers refuse (verl switches them off around its sync; OpenRLHF strips the
  setting before building sleep-mode engines, OpenRLHF#1274).

So the advice depends on the vLLM the package pins (`VLLM_FLOOR`, the `vllm` extra's floor),
not on the one a machine happens to have, nor on the package metadata an old install left.
From `vllm>=0.32` on (the floor since issue 37) the trainer may keep them: its staging
buffers are allocated with expandable segments off (`graft_env.policies.engine.staging`) and
sleep-mode engines start with the setting stripped from their environment, as verl and
OpenRLHF do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

ALLOCATOR_VAR = "PYTORCH_CUDA_ALLOC_CONF"
ALLOCATOR_VARS = (ALLOCATOR_VAR, "PYTORCH_ALLOC_CONF")  # torch >= 2.10 reads either name
ALLOCATOR_SETTING = "expandable_segments:True"
VLLM_EXPANDABLE_FIX = (0, 20)
"""The first vLLM release whose sleep mode accepts expandable segments (#40812)."""
VLLM_FLOOR = (0, 32)
"""The lower bound of this package's `vllm` extra (pyproject.toml: `vllm>=0.32`, kept equal
by tests/algorithms/training/test_memory_lifecycle.py), in the code so the advice does not
depend on what a machine has installed."""


def expandable(env: Mapping[str, str]) -> bool:
    """Whether the launch environment turns expandable segments on."""
    return any(ALLOCATOR_SETTING in env.get(name, "") for name in ALLOCATOR_VARS)


def allocator_advice(
    vllm_agents: Sequence[str], floor: tuple[int, ...], env: Mapping[str, str]
) -> str | None:
    """One line about expandable segments for a run whose `vllm_agents` sample with vLLM,
    under a pinned vLLM `floor` and the launch environment `env`; None: nothing to say."""
    if vllm_agents and floor < VLLM_EXPANDABLE_FIX:
        pinned = f"vllm>={'.'.join(map(str, floor))}"
        why = (
            f"vLLM agents ({', '.join(vllm_agents)}): vLLM before "
            f"{'.'.join(map(str, VLLM_EXPANDABLE_FIX))} asserts against them in sleep mode "
            f"({pinned} pinned), and the sync's CUDA IPC staging buffer in an expandable "
            "segment needs pidfd_getfd, refused in unprivileged containers"
        )
        if expandable(env):
            return f"warning: unset {ALLOCATOR_SETTING} in {ALLOCATOR_VAR}: {why}"
        return f"note: {ALLOCATOR_VAR}={ALLOCATOR_SETTING} is not advised for {why}"
    if expandable(env):
        return None
    return (
        f"hint: set {ALLOCATOR_VAR}={ALLOCATOR_SETTING} before launching: variable-length "
        "micro-batches fragment the default allocator's fixed segments"
    )
