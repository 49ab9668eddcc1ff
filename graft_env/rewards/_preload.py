"""Imported by the multiprocessing fork server, once: load and warm math-verify there.

Why a module: ``set_forkserver_preload`` takes module names. Importing this module in the
fork server means every verifier worker forked from it, including the replacement for a
worker killed on a timeout, starts with sympy and math-verify already loaded and warm
(milliseconds instead of seconds). Importing it anywhere else only costs the warm-up once.
"""

from graft_env.rewards import _worker  # noqa: F401  (the workers' entry point, preloaded)
from graft_env.rewards.checker import warm_up

warm_up()
