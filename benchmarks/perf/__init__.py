"""The measurement scripts: each runs as ``python -m benchmarks.perf.<name>``."""
