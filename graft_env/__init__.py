"""GRAFT's world: datasets, verifiable rewards, environments and policies.

Importing the package registers the Gymnasium environment
``graft_env/MathReasoning-v0``.
"""

import gymnasium

__version__ = "0.1.0"

if "graft_env/MathReasoning-v0" not in gymnasium.registry:
    gymnasium.register(
        id="graft_env/MathReasoning-v0",
        entry_point="graft_env.envs.math_env:MathReasoningEnv",
    )
