"""Reading a region of a Zarr v3 array through zarr, with zopt's checks around it.

zarr-python reads an empty or truncated shard file, and a half-empty index entry, as the fill
value; and a read during a rewrite of the shard (``zopt compact``, ``recompress --in-place``)
can pair an old index with the new file and fail its checksum (see ``zopt.store.rewrite``).
``read_region`` therefore, for an array in a local directory store:

1. checks the index of every shard file the region touches (``zopt.store.shards.read_index``: an
   empty or short file, a half-empty entry or one outside the chunk data is a
   ``ShardIndexError`` naming the shard);
2. reads the region through zarr; when that fails, reads it once more (a torn read resolves:
   the second read gets the new index);
3. when the second read fails too, reads the region's chunks one by one to find the first that
   fails, and raises ``ChunkDecodeError`` naming its key (and inner chunk for shards) and the
   store, once (a ``ChunkDecodeError`` of zopt's pipeline is not wrapped in another); when none
   fails alone, the second read's error is raised as it is.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from zopt.compat.zarr_compat import chunk_shape_of
from zopt.errors import ChunkDecodeError
from zopt.store.chunk_file import check_file

if TYPE_CHECKING:
    import zarr

    from zopt.store.shards import ShardLayout

__all__ = ["file_bound", "read_region", "shard_keys"]


def shard_keys(array: zarr.Array[Any], region: tuple[slice, ...]) -> Iterator[tuple[tuple[int, ...], str]]:
    """``(coords, key)`` of the stored chunks (shards when sharded) that ``region`` overlaps;
    keys relative to the array (``c/0/1``)."""
    meta = array.metadata
    step = chunk_shape_of(meta)
    ranges = [range(r.start // s, max(r.start // s, -(-r.stop // s))) for r, s in zip(region, step, strict=True)]
    for coords in np.ndindex(*[len(r) for r in ranges]):
        c = tuple(r[i] for r, i in zip(ranges, coords, strict=True))
        yield c, meta.encode_chunk_key(c)


#: a stored chunk (shard) file of more than this many times its decoded bytes (plus 1 MiB) is refused
#: unread: no codec chain in use expands data that much (zstd, blosc, gzip: a fraction of a percent;
#: a cast to a wider type: 8x)
EXPANSION = 16


def file_bound(array: zarr.Array[Any]) -> int | None:
    """The most bytes a stored chunk (shard) file of ``array`` may hold before it is refused
    unread; None for variable-length values (strings), which have no such bound."""
    try:
        native = np.dtype(array.metadata.data_type.to_native_dtype())  # type: ignore[union-attr]
    except (AttributeError, TypeError):  # a dtype numpy has no fixed size for
        return None
    if native.hasobject or native.kind == "T":
        return None
    return EXPANSION * math.prod(chunk_shape_of(array.metadata)) * native.itemsize + (1 << 20)


def _inner_regions(array: zarr.Array[Any], region: tuple[slice, ...], layout: ShardLayout | None) -> Iterator[tuple[str, tuple[int, ...] | None, tuple[slice, ...]]]:
    """``(chunk key, inner coords or None, sub-region)`` for every stored (inner) chunk of region."""
    inner = layout.inner_shape if layout is not None else chunk_shape_of(array.metadata)
    ranges = [range(r.start // s, max(r.start // s, -(-r.stop // s))) for r, s in zip(region, inner, strict=True)]
    for idx in np.ndindex(*[len(r) for r in ranges]):
        c = tuple(r[i] for r, i in zip(ranges, idx, strict=True))
        sub = tuple(slice(max(r.start, k * s), min(r.stop, (k + 1) * s)) for r, k, s in zip(region, c, inner, strict=True))
        if layout is None:
            yield array.metadata.encode_chunk_key(c), None, sub
        else:
            cps = layout.chunks_per_shard
            shard = tuple(k // n for k, n in zip(c, cps, strict=True))
            yield array.metadata.encode_chunk_key(shard), tuple(k % n for k, n in zip(c, cps, strict=True)), sub


def read_region(array: zarr.Array[Any], region: tuple[slice, ...], root: str | None = None) -> np.ndarray:
    """``array[region]`` as numpy, checked (see the module docstring).

    array : a zarr v3 ``Array``; region : slices with explicit starts and stops inside the
    array; root : the local store directory holding ``array`` (None: no file checks).
    Raises ShardIndexError naming a corrupt shard, ChunkDecodeError naming the chunk that does
    not decode twice in a row (``key`` is the store key: array path + chunk key).
    """
    from zopt.store.shards import ShardIndexError, layout_of, read_index

    layout = layout_of(array)
    prefix = f"{array.path}/" if array.path else ""
    store = root if root is not None else str(array.store)  # named in the errors
    if root is not None:
        bound = file_bound(array)
        for _, key in shard_keys(array, region):
            path = os.path.join(root, *prefix.split("/"), *key.split("/"))
            # zarr's store would block on a FIFO, read /dev/zero or a sparse 64 GiB file whole:
            # anything but a regular file of a bounded size is refused here, unread
            if check_file(path, bound, prefix + key, store) and layout is not None:
                try:
                    read_index(path, layout, prefix + key)
                except ShardIndexError as exc:
                    raise ShardIndexError(exc.key, exc.reason, store) from exc
    try:
        return np.asarray(array[region])
    except Exception:  # noqa: BLE001 - zarr and its codecs raise many types; retried, then named below
        pass
    try:
        return np.asarray(array[region])
    except Exception as exc:  # noqa: BLE001
        first = exc
    for key, inner, sub in _inner_regions(array, region, layout):
        if math.prod(s.stop - s.start for s in sub) == 0:
            continue
        try:
            array[sub]
        except ChunkDecodeError as exc:  # from zopt's pipeline: named once, with the store
            raise exc.in_store(prefix + key, inner, store) from exc
        except Exception as exc:  # noqa: BLE001
            raise ChunkDecodeError(prefix + key, inner, exc, store=store) from exc
    raise first  # no single chunk fails: not a corrupt chunk, let the error speak for itself
