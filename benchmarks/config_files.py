"""The run configs and grids that ship with graft, and how a `--config` path finds them.

They live in the checkout's top-level `configs/`; `benchmarks/configs` links to it, and the
wheel carries them as `benchmarks`' package data (pyproject's `package-data`), so
`importlib.resources` finds them in a checkout and in an installed wheel alike. A config path
that names no file here is looked up among them, so `configs/tiny_pair_graft.yaml` (the
README's spelling) and a bare `tiny_pair_graft.yaml` or `tiny_pair_graft` work from any
directory.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path, PurePosixPath

FOLDER = "configs"  # the folder's name in a checkout and in the package
DEFAULT = "testbed_pair_graft.yaml"  # `graft train`'s job: the study in miniature


def packaged() -> Path:
    """The folder of the shipped configs (grids in its `grids/`)."""
    return Path(str(resources.files("benchmarks") / FOLDER))


def default_config() -> Path:
    """`graft train`'s config when none is given: the testbed pair's GRAFT run."""
    return packaged() / DEFAULT


def find_config(path: str) -> str:
    """`path` if it names a file, else the shipped config it names (`configs/X.yaml`,
    `X.yaml` or `X`); a path that names neither is returned as given, so the error that
    follows names what the user wrote."""
    if Path(path).exists():
        return path
    parts = PurePosixPath(Path(path).as_posix()).parts
    relative = PurePosixPath(*parts[1:]) if parts[:1] == (FOLDER,) else PurePosixPath(path)
    for name in (relative, relative.with_name(relative.name + ".yaml")):
        shipped = packaged().joinpath(*name.parts)
        if ".." not in name.parts and shipped.is_file():
            return str(shipped)
    return path
