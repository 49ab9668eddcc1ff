"""Environments: single-prompt Gymnasium env and the multi-agent (PettingZoo) env."""

from graft_env.envs.math_env import MathReasoningEnv
from graft_env.envs.multi_agent import MultiAgentMathEnv
from graft_env.envs.schedule import epoch_permutation, prompt_batch_indices

__all__ = ["MathReasoningEnv", "MultiAgentMathEnv", "epoch_permutation", "prompt_batch_indices"]
