"""The chunk (shard) files of an array in a local store, listed from its chunk grid."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from zopt.compat.zarr_compat import regular_chunk_shape

__all__ = ["chunk_files"]


def chunk_files(store: str | os.PathLike[str], array: zarr.Array[Any]) -> Iterator[tuple[tuple[int, ...], Path]]:
    """``(coords, path)`` of every stored chunk (shard) file of ``array`` in a local store."""
    meta = array.metadata
    chunks = regular_chunk_shape(meta)
    if chunks is None:
        raise ValueError(f"array {array.path!r}: a regular chunk grid is needed to list its chunk files")
    grid = tuple(math.ceil(s / c) for s, c in zip(array.shape, chunks, strict=True))
    root = Path(os.fspath(store)) / array.path
    for coords in np.ndindex(*grid):
        path = root / meta.encode_chunk_key(coords)
        if path.is_file():
            yield coords, path
