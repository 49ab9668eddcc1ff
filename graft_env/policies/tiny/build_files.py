"""A finished tiny-pair build as files that travel: a directory `<pair>-<key>` holding
`build.json` and one folder per member (safetensors weights, tokenizer, config), named by
each member's weights SHA-256.

The same build command gives other weights on other CPUs (ATen's vector width, MKL's and
oneDNN's code paths sum in other orders), so a study that spans machines commits its builds
and loads them from the repository instead of rebuilding them. `check_build` says whether a
directory is the build a grid names: a finished build of this code's pair config, whose
members' weights have exactly the named digests. Any difference is a one-line error naming
the path and both digests; nothing else is ever loaded in its place. Free of torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from graft_env.policies.cache import weights_sha256

BUILD_FILE = "build.json"  # written last by `build_tiny_pair`: the build is complete


@dataclass(frozen=True)
class BuildFiles:
    """A checked build directory: where it lies (its parent is the cache it loads from),
    the build seed and cache key its build.json records, and each member's weights SHA-256."""

    directory: Path
    seed: int
    key: str
    weights_sha256: Mapping[str, str]

    @property
    def cache_dir(self) -> str:
        """The directory the build lies in, as the loader's `cache_dir`: relative to the
        working directory where it is inside it (a checkout run from its root), so what a
        result records names no machine's directories; otherwise absolute."""
        cache, here = self.directory.parent, Path.cwd()
        return str(cache.relative_to(here) if cache.is_relative_to(here) else cache)


def check_build(directory: str | Path, weights: Mapping[str, str]) -> BuildFiles:
    """`directory` checked as the build whose members have the `weights` SHA-256 (member name
    -> hex digest): a ValueError of one line if it holds no build.json, is not named
    `<pair>-<key>` as the loader looks it up, was built from another config than this code's
    pair (another cache key for its seed), names other members, or any member's weights
    differ from the named digest."""
    from graft_env.policies.tiny.config import PAIRS, cache_key  # the pairs' configs

    directory = Path(directory)
    build_file = directory / BUILD_FILE
    if not build_file.is_file():
        raise ValueError(f"{directory}: no {BUILD_FILE}; not a finished tiny-pair build")
    build = json.loads(build_file.read_text())
    name, key, seed = build["config"]["name"], build["key"], int(build["seed"])
    if directory.name != f"{name}-{key}":
        raise ValueError(
            f"{directory}: {BUILD_FILE} records {name} key {key}; the loader finds it only in "
            f"a directory named {name}-{key}"
        )
    config = PAIRS.get(name)
    if config is None or cache_key(config, seed) != key:
        expected = "no such pair" if config is None else f"key {cache_key(config, seed)}"
        raise ValueError(
            f"{directory}: built as {name} key {key} (seed {seed}), but this code's {name} "
            f"config gives {expected}: another config's build"
        )
    members = sorted(spec.name for spec in config.models)
    if sorted(weights) != members:
        raise ValueError(
            f"{directory}: weights_sha256 names {sorted(weights)}; the build's members are "
            f"{members}"
        )
    for member, expected in weights.items():
        found = weights_sha256(directory / member)
        if found != expected:
            raise ValueError(
                f"{directory / member}: weights SHA-256 {found}, but {expected} is named; a "
                f"build with other weights is not used in its place"
            )
    return BuildFiles(directory, seed, key, dict(weights))
