"""What runs write and read back, and how it is checked.

    from algorithms.storage import TrajectoryStore

Modules:

digests           size and SHA-256 records of files, checked when read back
store             the trajectory store (Parquet, one file per step and agent) and atomic writes
yaml_schema       typed YAML config files: field types, one-line errors, the schema text, --set
"""

from graft_env.lazy import lazy_exports

_EXPORTS = {
    "TrajectoryStore": "algorithms.storage.store",
    "StoreError": "algorithms.storage.store",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
