"""Imported first by the verifier pool's fork server: every worker runs one passive thread.

Why a module of its own, imported before `_preload`: thread pools read ``OMP_NUM_THREADS``
/ ``OMP_WAIT_POLICY`` once, when their library loads (numpy's OpenBLAS, which `_preload`
imports; torch, where a worker imports the program's main module after all: under spawn, or
a fork server without `_without_main`). Setting them here, in the fork server, puts them in
every worker's environment from its first instruction on
(`graft_env.threads.single_thread_process`). A worker verifies one item at a time beside as
many siblings as there are cores, so the parent's thread count is not for it.
"""

from graft_env.threads import single_thread_process

single_thread_process()
