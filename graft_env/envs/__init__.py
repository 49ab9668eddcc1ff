"""Environments: single-prompt Gymnasium env and the multi-agent (PettingZoo) env.

Modules:

math_env          single-prompt Gymnasium env: one problem, one answer, one reward
multi_agent       multi-agent training environment (PettingZoo parallel API)
problems          an environment's `dataset` argument -> a list of problems
schedule          which prompts a step sees: a pure function of (dataset size, seed, step)
"""

from graft_env.envs.math_env import MathReasoningEnv
from graft_env.envs.multi_agent import MultiAgentMathEnv
from graft_env.envs.schedule import epoch_permutation, prompt_batch_indices

__all__ = ["MathReasoningEnv", "MultiAgentMathEnv", "epoch_permutation", "prompt_batch_indices"]
