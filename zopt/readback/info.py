"""``zopt info``: what a local Zarr v3 store's arrays look like on disk (or in an Icechunk repository).

Per array: shard layout (``fixed-slot``, ``compact``, ``mixed``, ``unsharded``; see
``zopt.store.shards``), slot size, how full the slots of the stored inner chunks are, the histogram
of ``conditional`` masks read from the stored chunk headers, and stored against logical bytes
(apparent file sizes and allocated disk blocks, which differ for sparse fixed-slot shards).
Leftover temporary shard files of an interrupted write (``*.zopt-*``) are counted.
"""

from __future__ import annotations

import collections
import functools
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from zarr.core.metadata import ArrayV3Metadata

from zopt.codecs.chain import ChunkEncoder, chunk_spec
from zopt.codecs.conditional import ConditionalCodec, parse_header
from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.compat.zarr_compat import chunk_shape_of
from zopt.errors import ChunkDecodeError, OptionError
from zopt.io.sources import arrays_in
from zopt.store.checked_read import file_bound
from zopt.store.chunk_file import read_chunk_file
from zopt.store.files import TMP_MARK, chunk_files
from zopt.store.shards import (
    EMPTY,
    ShardLayout,
    allocated_bytes,
    classify,
    layout_of,
    shard_table,
)

if TYPE_CHECKING:
    from zarr.abc.store import Store
    from zarr.core.array_spec import ArraySpec
    from zarr.storage import StoreLike

__all__ = ["ArrayInfo", "arrays_in", "check_summary", "chunk_files", "chunk_grids", "inner_chunk_shape", "store_info"]


@dataclass
class ArrayInfo:
    """On-disk summary of one array. Sizes in bytes.

    layout : ``fixed-slot``, ``compact``, ``mixed`` (shards of both kinds), ``other`` (chunks
        neither packed nor at slot offsets), ``empty`` or ``unsharded``.
    slot_size : fixed-slot size (None when the inner chain has no bound or unsharded).
    slot_fill : stored chunk bytes / (stored chunks in fixed-slot shards × slot_size), or None.
    masks : ``conditional`` mask → number of stored (inner) chunks.
    checked_files : with ``store_info(check=True)``, the chunk (shard) files decoded whole, else None.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    layout: str
    shard_files: int
    chunks_total: int
    chunks_stored: int
    logical_bytes: int
    apparent_bytes: int
    allocated_bytes: int
    slot_size: int | None = None
    slot_fill: float | None = None
    layouts: collections.Counter = field(default_factory=collections.Counter)
    masks: collections.Counter = field(default_factory=collections.Counter)
    temp_files: int = 0
    checked_files: int | None = None


def _stored(store: Store | str | os.PathLike[str], array: zarr.Array[Any]) -> Iterator[tuple[tuple[int, ...], str, int, int, Callable[[], bytes]]]:
    """``(coords, key, size, allocated bytes, read)`` of every stored chunk (shard) of ``array``:
    the files of a local store, or the keys of a zarr Store (an Icechunk snapshot; allocated = size)."""
    if isinstance(store, str | os.PathLike):
        bound = file_bound(array)
        for coords, path in chunk_files(store, array):
            key = os.path.relpath(path, store)
            # a FIFO, a device or a file larger than any encoding of the chunk is refused unread, naming it
            read = functools.partial(_read_chunk_file, path, key, os.fspath(store), bound)
            yield coords, key, os.path.getsize(path), allocated_bytes(path), read
        return
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    meta = array.metadata
    grid = tuple(math.ceil(s / c) for s, c in zip(array.shape, chunk_shape_of(meta), strict=True))
    for coords in np.ndindex(*grid):
        key = "/".join(p for p in (array.path, meta.encode_chunk_key(coords)) if p)
        buf = sync(store.get(key, default_buffer_prototype()))
        if buf is not None:
            data = buf.to_bytes()
            yield coords, key, len(data), len(data), functools.partial(bytes, data)


def _read_chunk_file(path: str | os.PathLike[str], key: str, store: str, bound: int | None) -> bytes:
    return read_chunk_file(path, (1 << 62) if bound is None else bound, key, store).tobytes()


def _arrays(store: StoreLike, names: Sequence[str] | None) -> list[zarr.Array[Any]]:
    if isinstance(store, str | os.PathLike):
        return arrays_in(store, names)
    node = zarr.open(store, mode="r")
    found = {"": node} if isinstance(node, zarr.Array) else {
        p: a for p, a in node.members(max_depth=None) if isinstance(a, zarr.Array)}
    missing = [n for n in names or () if n not in found]
    if missing:
        raise OptionError("arrays", f"{missing} not in the store; it has {sorted(found)}")
    return [found[n] for n in names] if names else [found[k] for k in sorted(found)]


def _temp_files(store: StoreLike, array: zarr.Array[Any]) -> int:
    if not isinstance(store, str | os.PathLike):
        return 0  # a store's keys are put whole
    root = Path(os.fspath(store)) / array.path
    return sum(1 for p in root.rglob(f"*{TMP_MARK}*") if p.is_file())


class _MaskReader:
    """Reads the ``conditional`` mask of a stored chunk: decodes the bytes→bytes codecs after
    the conditional codec (e.g. crc32c), then parses its header."""

    def __init__(self, codecs: Sequence[Any], spec: ArraySpec) -> None:
        self.encoder = ChunkEncoder(codecs, spec)
        self.codec: ConditionalCodec | None = None
        self.stop = 0
        for i, codec in enumerate(self.encoder.bytes_bytes_codecs):
            if isinstance(codec, ConditionalCodec):
                self.codec, self.stop = codec, i + 1
                break

    def mask(self, data: bytes, key: str, inner: tuple[int, ...] | None = None) -> int:
        """The mask of the stored chunk ``data``; ChunkDecodeError naming ``key``, the inner chunk
        and the codec when a checksum does not match or the header is not valid."""
        assert self.codec is not None
        raw = self.encoder.decode_bytes(data, stop=self.stop, key=key, inner=inner)
        try:
            return parse_header(raw[: self.codec.header_nbytes], self.codec.header_bits, len(self.codec.codecs))
        except ValueError as exc:
            raise ChunkDecodeError(key, inner, exc, codec="conditional") from exc


def _info_sharded(store: str | os.PathLike[str], array: zarr.Array[Any], layout: ShardLayout, info: ArrayInfo) -> None:
    reader = _MaskReader(layout.inner_codecs, chunk_spec(layout.inner_shape, layout.dtype, layout.fill_value))
    try:
        info.slot_size = layout.slot_size
    except ValueError:
        info.slot_size = None
    slot_used = slot_chunks = 0
    for _, key, size, allocated, read in _stored(store, array):
        info.shard_files += 1
        info.apparent_bytes += size
        info.allocated_bytes += allocated
        blob = read()  # one read: index and chunks of the same file
        table = shard_table(blob, layout, key)
        kind = classify(table, layout, size)
        info.layouts[kind] += 1
        used = np.flatnonzero(table[:, 0] != EMPTY)
        info.chunks_stored += int(used.size)
        if kind == "fixed-slot":
            slot_used += int(table[used, 1].sum())
            slot_chunks += int(used.size)
        if reader.codec is not None and used.size:
            for i in used:
                start, n = int(table[i, 0]), int(table[i, 1])
                inner = tuple(int(c) for c in np.unravel_index(i, layout.chunks_per_shard))
                info.masks[reader.mask(blob[start : start + n], key, inner)] += 1
    if slot_chunks and info.slot_size:
        info.slot_fill = slot_used / (slot_chunks * info.slot_size)
    kinds = {k for k in info.layouts if k != "empty"}
    info.layout = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "empty")


@with_zopt_pipeline
def store_info(store: str | os.PathLike[str], arrays: Sequence[str] | None = None, check: bool = False) -> list[ArrayInfo]:
    """``ArrayInfo`` for each array of a local Zarr v3 store or an Icechunk repository
    (``icechunk://PATH[@BRANCH]``, ``…@snapshot:ID``) (or the named ``arrays``).

    check : also decode every stored chunk (``zopt.store.checked_read``: a chunk that fails twice in a
        row is named), so checksums and codecs are verified, not only the shard indexes.
    Raises ShardIndexError naming a shard whose index is corrupt (an empty or short file, a
    half-empty entry, an entry outside the chunk data or into the index) or does not match its
    file; ChunkDecodeError naming the chunk (shard and inner chunk) and the codec when a stored
    chunk does not decode.
    """
    from zopt.compat.icechunk_compat import is_icechunk, readonly_store

    if is_icechunk(store):  # a branch's tip or a snapshot, read only
        store, _ = readonly_store(store, "store")
    out = []
    for array in _arrays(store, arrays):
        meta = array.metadata
        itemsize = array.dtype.itemsize
        info = ArrayInfo(
            name=array.path or "/",
            shape=tuple(array.shape),
            dtype=str(meta.data_type.to_json(3) if hasattr(meta, "data_type") else array.dtype),
            layout="unsharded",
            shard_files=0,
            chunks_total=math.prod(math.ceil(s / c) for s, c in zip(array.shape, inner_chunk_shape(array), strict=True)),
            chunks_stored=0,
            logical_bytes=int(math.prod(array.shape) * itemsize),
            apparent_bytes=0,
            allocated_bytes=0,
            temp_files=_temp_files(store, array),
        )
        layout = layout_of(array)
        if layout is not None:
            _info_sharded(store, array, layout, info)
        else:
            _info_unsharded(store, array, info)
        if check:
            info.checked_files = _check_chunks(store, array)
        out.append(info)
    return out


def check_summary(infos: Sequence[ArrayInfo]) -> str:
    """What ``store_info(check=True)`` checked, as one line (``zopt info --check`` prints it): it
    returns only when every chunk decoded, so the line says the check held."""
    files = sum(a.checked_files or 0 for a in infos)
    chunks = sum(a.chunks_stored for a in infos)
    n = len(infos)
    return (f"check: decoded every stored chunk of {n} array{'s' if n != 1 else ''} ({chunks} inner chunk"
            f"{'s' if chunks != 1 else ''} in {files} file{'s' if files != 1 else ''}, checksums and codecs "
            "included): every one decoded, no error")


def inner_chunk_shape(array: zarr.Array[Any]) -> tuple[int, ...]:
    """The inner chunk shape of a sharded array, else its chunk shape (elements)."""
    layout = layout_of(array)
    return layout.inner_shape if layout is not None else chunk_shape_of(array.metadata)


def _info_unsharded(store: str | os.PathLike[str], array: zarr.Array[Any], info: ArrayInfo) -> None:
    meta = array.metadata
    reader = None
    if isinstance(meta, ArrayV3Metadata):
        reader = _MaskReader(meta.codecs, chunk_spec(chunk_shape_of(meta), meta.data_type, meta.fill_value))
    for _, key, size, allocated, read in _stored(store, array):
        info.shard_files += 1
        info.chunks_stored += 1
        info.apparent_bytes += size
        info.allocated_bytes += allocated
        if reader is not None and reader.codec is not None:
            info.masks[reader.mask(read(), key)] += 1


def _check_chunks(store: str | os.PathLike[str], array: zarr.Array[Any]) -> int:
    """Decode every stored chunk (shard) file of ``array``, one read per file; how many."""
    from zopt.store.checked_read import read_region

    step = chunk_shape_of(array.metadata)
    files = 0
    for coords, *_ in _stored(store, array):
        region = tuple(slice(c * s, min((c + 1) * s, n)) for c, s, n in zip(coords, step, array.shape, strict=True))
        read_region(array, region, os.fspath(store) if isinstance(store, str | os.PathLike) else str(store))
        files += 1
    return files


def chunk_grids(store: str | os.PathLike[str], array: zarr.Array[Any]) -> tuple[np.ndarray | None, np.ndarray]:
    """Per inner chunk of ``array`` in a local store: ``(masks, ratios)`` over the inner-chunk grid.

    masks : int16, the ``conditional`` mask read from each stored chunk's header, -1 where the
        chunk is not stored (it equals the fill value); None when the chain has no conditional
        codec. ratios : float64, raw chunk bytes / stored bytes, NaN where not stored.
    Raises ShardIndexError naming a shard whose index is corrupt.
    """
    inner = inner_chunk_shape(array)
    grid = tuple(math.ceil(s / c) for s, c in zip(array.shape, inner, strict=True))
    raw = math.prod(inner) * array.dtype.itemsize
    masks = np.full(grid, -1, dtype=np.int16)
    ratios = np.full(grid, np.nan)
    layout = layout_of(array)
    if layout is not None:
        reader = _MaskReader(layout.inner_codecs, chunk_spec(layout.inner_shape, layout.dtype, layout.fill_value))
        for shard, key, _, _, read in _stored(store, array):
            blob = read()  # one read: index and chunks of the same file
            table = shard_table(blob, layout, key)
            for i in np.flatnonzero(table[:, 0] != EMPTY):
                local = np.unravel_index(int(i), layout.chunks_per_shard)
                index = tuple(s * n + c for s, n, c in zip(shard, layout.chunks_per_shard, local, strict=True))
                start, n = int(table[i, 0]), int(table[i, 1])
                ratios[index] = raw / n
                if reader.codec is not None:
                    masks[index] = reader.mask(blob[start : start + n], key, tuple(int(c) for c in local))
        return (masks if reader.codec is not None else None), ratios
    meta = array.metadata
    chunk_reader = (_MaskReader(meta.codecs, chunk_spec(inner, meta.data_type, meta.fill_value))
                    if isinstance(meta, ArrayV3Metadata) else None)  # None for Zarr v2 arrays
    has_masks = chunk_reader is not None and chunk_reader.codec is not None
    for coords, key, _, _, read in _stored(store, array):
        data = read()
        ratios[coords] = raw / max(len(data), 1)
        if has_masks and chunk_reader is not None:
            masks[coords] = chunk_reader.mask(data, key)
    return (masks if has_masks else None), ratios
