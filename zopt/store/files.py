"""The chunk (shard) files of an array in a local store, listed from its chunk grid."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import zarr

__all__ = ["chunk_files"]


def chunk_files(store: str | os.PathLike, array: zarr.Array) -> Iterator[tuple[tuple[int, ...], Path]]:
    """``(coords, path)`` of every stored chunk (shard) file of ``array`` in a local store."""
    meta = array.metadata
    grid = tuple(math.ceil(s / c) for s, c in zip(array.shape, meta.chunk_grid.chunk_shape, strict=True))
    root = Path(os.fspath(store)) / array.path
    for coords in np.ndindex(*grid):
        path = root / meta.encode_chunk_key(coords)
        if path.is_file():
            yield coords, path
