"""Input checks shared by the pure core functions.

The core sits at the seam between rollouts and updates, so a wrong shape or a
success count out of range here means a bug upstream. Each check raises with the
argument name and the first offending position instead of letting numpy
broadcast, truncate or silently cast the problem away.
"""

from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike


def check_int(value: object, name: str, *, minimum: int) -> int:
    """Return `value` as an int, rejecting bools, non-integers and values below `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_rng(rng: object, name: str = "rng") -> np.random.Generator:
    """Require a numpy Generator so that every random choice is reproducible from a seed."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"{name} must be a numpy.random.Generator (np.random.default_rng(seed)), "
            f"got {type(rng).__name__}"
        )
    return rng


def integer_array(values: ArrayLike, name: str, *, ndim: int) -> np.ndarray:
    """Return `values` as int64 with `ndim` dimensions; floats must hold whole numbers."""
    arr = np.asarray(values)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            position = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{name}{list(position)} = {arr[position]} is not a whole number")
    return arr.astype(np.int64)


def success_counts(values: ArrayLike, name: str, *, ndim: int, n: int | None) -> np.ndarray:
    """Return success counts k as int64, each in [0, n] (or >= 0 when n is None)."""
    k = integer_array(values, name, ndim=ndim)
    bad = (k < 0) | (k > n) if n is not None else k < 0
    if bad.any():
        position = [int(i) for i in np.argwhere(bad)[0]]
        bound = f"[0, n={n}]" if n is not None else ">= 0"
        raise ValueError(f"{name}{position} = {k[tuple(position)]} is outside {bound}")
    return k


def finite_array(values: ArrayLike, name: str) -> np.ndarray:
    """Return `values` as float64, rejecting NaN and infinities with their position."""
    arr = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        position = [int(i) for i in np.argwhere(bad)[0]]
        raise ValueError(f"{name}{position} = {arr[tuple(position)]} is not finite")
    return arr
