"""GRAFT's world: datasets, verifiable rewards, environments and policies.

Importing the package registers the Gymnasium environment
``graft_env/MathReasoning-v0``.

Modules:

data/             datasets: one registry, the real benchmarks, procedural arithmetic
envs/             the Gymnasium env, the multi-agent (PettingZoo) env, the prompt schedule
eval/             the SPEC §10 evaluation protocol, its results and their files
lazy              package attributes loaded on first use (PEP 562)
policies/         language-model policies behind one small interface
prompts           the paper's prompt template (GRAFT-SPEC §10)
rewards/          the verifiable reward: last \\boxed{} answer, math-verify in worker processes
schema            typed options: constrained field types, their checks, one-line errors
suggest           "did you mean": the closest valid names to a mistyped one, for errors
threads           CPU threads: torch's count and OpenMP's waiting, chosen before torch starts
types             the data between stages: rollouts, transferred groups, train batches
"""

import gymnasium

__version__ = "0.1.0"

if "graft_env/MathReasoning-v0" not in gymnasium.registry:
    gymnasium.register(
        id="graft_env/MathReasoning-v0",
        entry_point="graft_env.envs.math_env:MathReasoningEnv",
    )
