"""Datasets for GRAFT: one registry, real benchmarks read from a data directory,
and a procedural arithmetic family for fast tests and tiny models.

    from graft_env.data import load, available
    problems = load("math500", data_dir="../shared/data")   # or set $GRAFT_DATA_DIR
    practice = load("procedural", "train", skills=["addition", "gcd"], size=100)

Importing this package registers every built-in dataset.
"""

from graft_env.data import benchmarks, procedural  # importing registers their datasets
from graft_env.data.boxed import extract_last_boxed
from graft_env.data.files import resolve_data_dir
from graft_env.data.problem import DatasetError, Problem
from graft_env.data.registry import available, load, register_dataset

__all__ = [
    "DatasetError",
    "Problem",
    "available",
    "benchmarks",
    "extract_last_boxed",
    "load",
    "procedural",
    "register_dataset",
    "resolve_data_dir",
]
