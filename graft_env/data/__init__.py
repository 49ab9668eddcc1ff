"""Datasets for GRAFT: one registry, real benchmarks read from a data directory,
and a procedural arithmetic family for fast tests and tiny models.

    from graft_env.data import load, available
    problems = load("math500")   # data_dir=... or $GRAFT_DATA_DIR, else the Hub (source=)
    practice = load("procedural", "train", skills=["addition", "gcd"], size=100)

Importing this package registers every built-in dataset.

Modules:

benchmarks        the real datasets: the five evaluation benchmarks, MATH train and GSM8K
boxed             find the final answer a solution put in \\boxed{...} (or \\fbox{...})
fetch             download the benchmarks from the Hugging Face Hub into a data directory
files             where the data directory is; reading its JSONL files row by row
normalise         one raw benchmark row -> a `Problem`
problem           the record every loader returns, and the error they raise
procedural/       procedural arithmetic tasks (the tiny pair's and the testbed's data)
registry          dataset registry: one name per dataset, one `load` for all
"""

from graft_env.data import benchmarks, procedural  # importing registers their datasets
from graft_env.data.boxed import extract_last_boxed
from graft_env.data.files import read_jsonl, resolve_data_dir
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
    "read_jsonl",
    "register_dataset",
    "resolve_data_dir",
]
