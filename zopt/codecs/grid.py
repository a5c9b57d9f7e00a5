"""Pure chunk-grid arithmetic: no I/O, no zarr, no Dask.

Fill checks, padding of edge chunks, chunk shapes of a target size and the regions of a grid;
the rest of the engine's grid maths moves here as the engine is split.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["fill_rows", "fit_shape", "is_fill", "padded", "regions"]


def _uint_view(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    if a.dtype.itemsize in (1, 2, 4, 8):
        return a.view(f"u{a.dtype.itemsize}")
    return a.view(np.uint8).reshape(*a.shape, a.dtype.itemsize)


def is_fill(chunk: np.ndarray, fill: np.ndarray) -> bool:
    """True when every element of ``chunk`` has the bit pattern of ``fill`` (a 0-d array).

    Bitwise, so ``-0.0`` is not the fill value ``0.0`` and the chunk is kept. A chunk whose first
    element differs is answered from that element alone (~1 µs instead of a pass over the chunk).
    """
    if chunk.size and chunk.dtype == fill.dtype and chunk[(0,) * chunk.ndim].tobytes() != fill.tobytes():
        return False
    return bool(np.all(_uint_view(chunk) == _uint_view(fill)))


def fill_rows(stack: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """``is_fill`` of every chunk of ``stack`` (``(n, *chunk shape)``, ``fill``'s type) as a bool
    ``(n,)`` array: the first elements compared in one call, the whole chunk only where it matches."""
    n = len(stack)
    if n == 0 or stack[0].size == 0:
        return np.ones(n, dtype=bool)
    flat = _uint_view(stack.reshape(n, -1))
    bits = _uint_view(fill.reshape(1))[0]
    first = flat[:, 0] == bits
    if first.ndim > 1:  # items of no unsigned type: (n, itemsize) bytes
        first = first.all(axis=1)
    out = np.zeros(n, dtype=bool)
    for k in np.flatnonzero(first).tolist():
        out[k] = bool(np.all(flat[k] == bits))
    return out


def padded(values: np.ndarray, shape: tuple[int, ...], fill: np.ndarray) -> np.ndarray:
    """``values`` at the origin of an array of ``shape`` filled with ``fill`` (edge chunks)."""
    if values.shape == shape:
        return values
    out = np.full(shape, fill, dtype=fill.dtype)
    out[tuple(slice(0, s) for s in values.shape)] = values
    return out


def fit_shape(shape: tuple[int, ...], target_elems: int) -> tuple[int, ...]:
    """A chunk shape of about ``target_elems`` elements, filling the last dimensions first."""
    out = []
    remaining = max(1, target_elems)
    for s in reversed(shape):
        take = max(1, min(s, remaining))
        out.append(take)
        remaining = max(1, remaining // take)
    return tuple(reversed(out))


def regions(shape: tuple[int, ...], step: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """The regions of a grid of ``step``-sized cells over an array of ``shape``, in C order,
    clipped at the array's edge (e.g. every shard's region)."""
    ranges = [range(0, s, k) for s, k in zip(shape, step, strict=True)]
    return [tuple(slice(o, min(o + k, s)) for o, k, s in zip(origin, step, shape, strict=True)) for origin in itertools.product(*ranges)]
