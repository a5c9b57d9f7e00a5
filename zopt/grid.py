"""Pure chunk-grid arithmetic: no I/O, no zarr, no Dask.

Fill checks and padding of edge chunks today; the rest of the grid and region maths of the
engine moves here as the engine is split (issue 17's target shape).
"""

from __future__ import annotations

import numpy as np

__all__ = ["is_fill", "padded"]


def _uint_view(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    if a.dtype.itemsize in (1, 2, 4, 8):
        return a.view(f"u{a.dtype.itemsize}")
    return a.view(np.uint8).reshape(*a.shape, a.dtype.itemsize)


def is_fill(chunk: np.ndarray, fill: np.ndarray) -> bool:
    """True when every element of ``chunk`` has the bit pattern of ``fill`` (a 0-d array).

    Bitwise, so ``-0.0`` is not the fill value ``0.0`` and the chunk is kept.
    """
    return bool(np.all(_uint_view(chunk) == _uint_view(fill)))


def padded(values: np.ndarray, shape: tuple[int, ...], fill: np.ndarray) -> np.ndarray:
    """``values`` at the origin of an array of ``shape`` filled with ``fill`` (edge chunks)."""
    if values.shape == shape:
        return values
    out = np.full(shape, fill, dtype=fill.dtype)
    out[tuple(slice(0, s) for s in values.shape)] = values
    return out
