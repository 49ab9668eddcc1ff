"""Evaluation, the comparison harness and the benchmark scripts.

Every script here runs as ``python -m benchmarks.<name>``, which imports this package before
the script itself: so this is where the OpenMP defaults (one thread, passive waiting) are set,
before any script imports torch (`graft_env.threads` says why; a user's own settings win).
"""

from graft_env.threads import process_defaults

process_defaults()
