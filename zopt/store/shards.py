"""Shard layouts: the ``sharding_indexed`` file format written packed or in fixed slots.

A shard file (``sharding_indexed`` codec, Zarr v3 core spec) holds the encoded inner chunks of
one shard and an index of ``(offset, nbytes)`` pairs — uint64, one pair per inner chunk in C
order, ``2^64-1`` for both when the chunk is empty — encoded with the ``index_codecs`` (by
default ``bytes`` little-endian + ``crc32c``) at the start or the end of the file. The spec
puts no constraint on where the chunks sit, so two layouts are valid and every reader opens
both:

- **compact** (packed): chunks back to back in C order of their position in the shard, no
  gaps. zarr-python packs too (in Morton order).
- **fixed-slot**: inner chunk ``i`` (C order within the shard) starts at
  ``data_offset + i * slot_size``, where ``slot_size`` is the inner codec chain's upper bound
  on an encoded chunk (``zopt.codecs.chain``) and ``data_offset`` is the index size when the
  index is at the start, else 0; an index at the end follows the last slot. Each chunk owns its
  slot, so different tasks, threads or processes write the chunks of one shard concurrently
  with positional writes (POSIX ``pwrite``), and unused slot space is a hole in a sparse file.

Fixed-slot shards are assembled under a temporary key (``<key>.zopt-slots-<job>``) and renamed
onto the shard key (``os.replace``, atomic on POSIX) by ``finalize_slots`` after the index is
written, so a reader sees the previous shard or none, never a half-written one.
Rewriting a shard that readers may be reading (``zopt compact``, ``recompress --in-place``)
follows ``zopt.store.rewrite``, which makes a torn read (old index, new file) fail instead of
returning wrong values.

Only local directory stores are written here (the engine writes other stores through zarr).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from zopt.codecs.chain import ChunkEncoder, chunk_spec
from zopt.compat.zarr_compat import chunk_shape_of, endian_of, index_location_of
from zopt.errors import ChunkDecodeError, ZoptError
from zopt.store.files import TMP_MARK, atomic_write, temp_path, write_all

if TYPE_CHECKING:
    import zarr
    from zarr.core.metadata import ArrayV3Metadata

__all__ = [
    "EMPTY",
    "ShardIndexError",
    "ShardLayout",
    "finalize_slots",
    "layout_of",
    "check_table",
    "read_index",
    "read_index_stat",
    "read_shard",
    "remove_temp_files",
    "v3_metadata",
    "write_all",
    "pack_batches",
    "write_packed",
    "write_slots",
]

#: index entry of an empty inner chunk (offset and nbytes)
EMPTY = np.uint64(2**64 - 1)


class ShardIndexError(ZoptError, ValueError):
    """A shard's index is corrupt or does not match its file. ``key``: the shard's path (or store
    key); ``store``: the store holding it, when known, named after the key."""

    def __init__(self, key: str, reason: str, store: str | None = None) -> None:
        self.key, self.reason, self.store = key, reason, store
        super().__init__(f"shard {key!r}{f' in {store}' if store else ''}: {reason}")


@functools.lru_cache(maxsize=64)
def _index_encoder(index_codecs: tuple[Any, ...], chunks_per_shard: tuple[int, ...]) -> ChunkEncoder:
    from zarr.core.dtype import UInt64

    spec = chunk_spec((*chunks_per_shard, 2), UInt64(endianness="little"), 2**64 - 1)
    return ChunkEncoder(index_codecs, spec)


@functools.lru_cache(maxsize=16)
def _local_grid(chunks_per_shard: tuple[int, ...]) -> np.ndarray:
    """The coordinates of a shard's inner chunks in it, int64 ``(n, ndim)`` in C order (read-only)."""
    grid = np.indices(chunks_per_shard, dtype=np.int64).reshape(len(chunks_per_shard), -1).T.copy()
    grid.flags.writeable = False
    return grid


@dataclass(frozen=True)
class ShardLayout:
    """Geometry of the shards of one array.

    shard_shape, inner_shape : elements per dimension; ``chunks_per_shard`` is their ratio.
    index_location : ``"start"`` or ``"end"``.
    index_codecs, inner_codecs : zarr codec objects of the ``sharding_indexed`` configuration.
    dtype, fill_value : the array's zarr data type (``ZDType``) and fill value.
    """

    shard_shape: tuple[int, ...]
    inner_shape: tuple[int, ...]
    index_location: str
    index_codecs: tuple[Any, ...]
    inner_codecs: tuple[Any, ...]
    dtype: Any
    fill_value: Any

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(self.shard_shape, self.inner_shape, strict=True))

    @property
    def n_inner(self) -> int:
        return math.prod(self.chunks_per_shard)

    def _index_encoder(self) -> ChunkEncoder:
        try:  # read once per shard: build the encoder once per process and geometry
            return _index_encoder(self.index_codecs, self.chunks_per_shard)
        except TypeError:  # an unhashable codec
            return _index_encoder.__wrapped__(self.index_codecs, self.chunks_per_shard)

    @functools.cached_property  # ints only: the layout is pickled to workers, encoders are not
    def index_nbytes(self) -> int:
        """Size in bytes of the encoded index (16 bytes per inner chunk + e.g. 4 for crc32c)."""
        return self._index_encoder().max_encoded_size()

    def inner_encoder(self) -> ChunkEncoder:
        """A ``ChunkEncoder`` for the inner chunks (shape ``inner_shape``)."""
        return ChunkEncoder(self.inner_codecs, chunk_spec(self.inner_shape, self.dtype, self.fill_value))

    @functools.cached_property
    def slot_size(self) -> int:
        """Fixed-slot size in bytes: the inner chain's bound on one encoded inner chunk.

        Raises ValueError naming the codec when the chain has no known bound.
        """
        return self.inner_encoder().max_encoded_size()

    @property
    def data_offset(self) -> int:
        """Where the first slot starts: after the index if it is at the start, else 0."""
        return self.index_nbytes if self.index_location == "start" else 0

    def slot_offset(self, i: int) -> int:
        """Byte offset of the slot of inner chunk ``i`` (C order in the shard)."""
        return self.data_offset + i * self.slot_size

    @property
    def fixed_slot_nbytes(self) -> int:
        """Size in bytes of a complete fixed-slot shard file, index included."""
        return self.n_inner * self.slot_size + self.index_nbytes

    def encode_index(self, table: np.ndarray) -> bytes:
        """Encode an ``(n_inner, 2)`` uint64 table of (offset, nbytes) with the index codecs."""
        arr = np.asarray(table, dtype="<u8").reshape(*self.chunks_per_shard, 2)
        return self._index_encoder().encode(arr).data.tobytes()

    def decode_index(self, data: bytes | np.ndarray, key: str) -> np.ndarray:
        """Decode index bytes into an ``(n_inner, 2)`` uint64 table.

        Raises ShardIndexError naming ``key`` when the checksum or the length is wrong.
        """
        enc = self._index_encoder()
        try:
            raw = enc.decode_bytes(np.frombuffer(bytes(data), dtype=np.uint8))
        except ChunkDecodeError as exc:
            cause = exc.__cause__
            raise ShardIndexError(key, f"index does not decode ({type(cause).__name__}: {cause})") from cause
        codec = enc.array_bytes_codec
        if raw.size != 16 * self.n_inner:
            raise ShardIndexError(key, f"index has {raw.size} bytes after decoding, expected {16 * self.n_inner}")
        endian = endian_of(codec) or "little"
        return raw.view("<u8" if endian == "little" else ">u8").astype(np.uint64).reshape(self.n_inner, 2)

    def shard_region(self, shard_coords: tuple[int, ...], array_shape: tuple[int, ...]) -> tuple[slice, ...]:
        """The array region of a shard, clipped to the array."""
        return tuple(
            slice(c * s, min((c + 1) * s, n))
            for c, s, n in zip(shard_coords, self.shard_shape, array_shape, strict=True)
        )

    def inner_chunks(self, shard_coords: tuple[int, ...], array_shape: tuple[int, ...]) -> Iterator[tuple[int, tuple[int, ...], tuple[slice, ...]]]:
        """``(i, chunk_index, region)`` for the inner chunks of a shard that overlap the array.

        i : position in the shard (C order); chunk_index : coordinates in the array's
        inner-chunk grid; region : the chunk's array region, clipped to the array.
        """
        for i, index, region, _ in self.inner_chunk_items(shard_coords, array_shape):
            yield i, index, region

    def inner_chunk_grid(self, shard_coords: tuple[int, ...], array_shape: tuple[int, ...]
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The inner chunks of a shard that overlap the array, in shard (C) order, as arrays:
        ``(positions, indices, full)``, int64 ``(n,)`` (position in the shard), int64 ``(n, ndim)``
        (coordinates in the array's inner-chunk grid) and bool ``(n,)`` (the chunk lies whole inside
        the array). A few numpy calls, no slices (issue 34: tuples of slices per chunk cost a
        64-chunk shard ~0.8 ms of GIL)."""
        cps = self.chunks_per_shard
        index = _local_grid(cps) + np.asarray(shard_coords, dtype=np.int64) * np.asarray(cps, dtype=np.int64)
        start = index * np.asarray(self.inner_shape, dtype=np.int64)
        shape = np.asarray(array_shape, dtype=np.int64)
        inside = np.asarray((start < shape).all(axis=1))
        full = np.asarray((start + np.asarray(self.inner_shape, dtype=np.int64) <= shape).all(axis=1))
        if inside.all():
            return np.arange(len(index), dtype=np.int64), index, full
        positions = np.flatnonzero(inside)
        return positions, index[positions], full[positions]

    def inner_chunk_region(self, index: tuple[int, ...], array_shape: tuple[int, ...]) -> tuple[slice, ...]:
        """The array region of inner chunk ``index`` (grid coordinates), clipped to the array."""
        return tuple(slice(i * k, min((i + 1) * k, n)) for i, k, n in zip(index, self.inner_shape, array_shape, strict=True))

    def inner_chunk_items(self, shard_coords: tuple[int, ...], array_shape: tuple[int, ...]) -> list[tuple[int, tuple[int, ...], tuple[slice, ...], bool]]:
        """``inner_chunks`` as a list, each item with a fourth field: True when the chunk lies
        whole inside the array (its region has ``inner_shape``); ``inner_chunk_grid`` with the
        regions made."""
        positions, grid, full = self.inner_chunk_grid(shard_coords, array_shape)
        return [(i, index, self.inner_chunk_region(index, array_shape), whole)
                for i, index, whole in zip(positions.tolist(), map(tuple, grid.tolist()), full.tolist(), strict=True)]


def v3_metadata(array: zarr.Array[Any]) -> ArrayV3Metadata:
    """The metadata of ``array``, a Zarr v3 array (what zopt writes and rewrites in place).

    Raises ZoptError for a Zarr v2 array.
    """
    from zarr.core.metadata import ArrayV3Metadata

    meta = array.metadata
    if not isinstance(meta, ArrayV3Metadata):
        raise ZoptError(f"array {array.path or '/'} of {array.store_path} is a Zarr v2 array; a Zarr v3 one was expected")
    return meta


def layout_of(array: zarr.Array[Any]) -> ShardLayout | None:
    """The ``ShardLayout`` of a zarr v3 array, or None when it is not sharded."""
    from zarr.codecs import ShardingCodec
    from zarr.core.metadata import ArrayV3Metadata

    meta = array.metadata
    if not isinstance(meta, ArrayV3Metadata):
        return None
    sharding = [c for c in meta.codecs if isinstance(c, ShardingCodec)]
    if not sharding:
        return None
    sc = sharding[0]
    return ShardLayout(
        shard_shape=chunk_shape_of(meta),
        inner_shape=tuple(sc.chunk_shape),
        index_location=index_location_of(sc),
        index_codecs=tuple(sc.index_codecs),
        inner_codecs=tuple(sc.codecs),
        dtype=meta.data_type,
        fill_value=meta.fill_value,
    )


# -- chunk preparation --------------------------------------------------------------------------------


# -- file writing ----------------------------------------------------------------------------------


def remove_temp_files(root: str | os.PathLike[str]) -> int:
    """Remove every zopt temporary file (``*.zopt-*``) under the directory ``root`` (a partial
    store the job owns). Returns how many."""
    n = 0
    for p in Path(root).rglob(f"*{TMP_MARK}*"):
        if p.is_file():
            p.unlink(missing_ok=True)
            n += 1
    return n


def tmp_path(path: str | os.PathLike[str], job_id: str) -> Path:
    """The temporary path a shard is assembled under before its rename."""
    return temp_path(path, f"slots-{job_id}")


def write_slots(
    tmp: str | os.PathLike[str], layout: ShardLayout, chunks: Iterable[tuple[int, np.ndarray]]
) -> list[tuple[int, int]]:
    """Write encoded inner chunks into their slots of the temporary shard file ``tmp``.

    chunks : ``(i, data)`` with ``i`` the position in the shard (C order) and ``data`` 1-D
    uint8 of at most ``slot_size`` bytes. Safe to call from several processes at once for
    disjoint ``i`` (``os.pwrite``, no truncation). Returns ``[(i, nbytes), …]``.
    Raises ValueError when a chunk exceeds its slot.
    """
    slot = layout.slot_size
    written = []
    Path(tmp).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for i, data in chunks:
            if data.size > slot:
                raise ValueError(f"inner chunk {i}: {data.size} bytes do not fit its slot of {slot}")
            os.pwrite(fd, np.ascontiguousarray(data).data, layout.slot_offset(i))
            written.append((i, int(data.size)))
    finally:
        os.close(fd)
    return written


def finalize_slots(
    tmp: str | os.PathLike[str], path: str | os.PathLike[str], layout: ShardLayout, written: Iterable[tuple[int, int]]
) -> int:
    """Write the index of a fixed-slot shard and rename ``tmp`` onto ``path`` (atomic).

    written : ``(i, nbytes)`` of every inner chunk stored in ``tmp``; the others are empty.
    With none, ``tmp`` and ``path`` are removed (the shard equals the fill value).
    Returns the shard file's size in bytes (0 when removed).

    Idempotent (Dask retries tasks): when ``path`` already holds this index — a finalize that
    completed before — ``tmp`` (possibly recreated by a retried slot writer, so holding only
    some slots) is removed and ``path`` is left as it is. Raises ShardIndexError naming
    ``path`` when ``tmp`` is gone and ``path`` holds another index (its slots cannot be found).
    """
    table = np.full((layout.n_inner, 2), EMPTY, dtype=np.uint64)
    for i, nbytes in written:
        table[i] = (layout.slot_offset(i), nbytes)
    if not (table[:, 0] != EMPTY).any():
        for p in (tmp, path):
            Path(p).unlink(missing_ok=True)
        return 0
    index = layout.encode_index(table)
    where = 0 if layout.index_location == "start" else layout.n_inner * layout.slot_size
    if _holds_index(path, layout, index, where):
        Path(tmp).unlink(missing_ok=True)
        return os.path.getsize(path)
    if not os.path.exists(tmp):
        raise ShardIndexError(os.fspath(path), f"its slots' temporary file {os.fspath(tmp)!r} is gone and the shard "
                              "does not hold the index being finalized; run the job again")
    fd = os.open(tmp, os.O_WRONLY)
    try:
        os.pwrite(fd, index, where)
        os.ftruncate(fd, where + len(index) if layout.index_location == "end" else layout.fixed_slot_nbytes)
    finally:
        os.close(fd)
    # not atomic_write: ``tmp`` is assembled by several tasks (its name from temp_path all the same);
    # no fsync, like every other shard
    os.replace(tmp, path)
    return os.path.getsize(path)


def _holds_index(path: str | os.PathLike[str], layout: ShardLayout, index: bytes, where: int) -> bool:
    """True when the file ``path`` exists, has the size of a finalized fixed-slot shard with
    ``index`` at byte ``where``, and holds exactly those index bytes there."""
    size = where + len(index) if layout.index_location == "end" else layout.fixed_slot_nbytes
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size != size:
                return False
            f.seek(where)
            return f.read(len(index)) == index
    except FileNotFoundError:
        return False


def pack_parts(layout: ShardLayout, chunks: Iterable[tuple[int, np.ndarray | bytes | memoryview]]) -> list[memoryview] | None:
    """The pieces of a packed shard in file order — chunks in C order, then (or before) the
    index — without joining them (``write_packed`` writes them one after the other, so a shard
    is never copied whole in memory). Same arguments and None as ``pack``."""
    items = sorted(((i, _byte_view(d)) for i, d in chunks), key=lambda x: x[0])
    if not items:
        return None
    table = np.full((layout.n_inner, 2), EMPTY, dtype=np.uint64)
    sizes = np.fromiter((d.nbytes for _, d in items), dtype=np.uint64, count=len(items))
    where = np.fromiter((i for i, _ in items), dtype=np.intp, count=len(items))
    table[where, 1] = sizes
    table[where, 0] = layout.data_offset + np.cumsum(sizes) - sizes
    index = memoryview(layout.encode_index(table))
    parts = [d for _, d in items]
    return [index, *parts] if layout.index_location == "start" else [*parts, index]


def pack_batches(layout: ShardLayout, batches: Sequence[Any]) -> list[memoryview] | None:
    """``pack_parts`` for ``zopt.codecs.batch.EncodedBatch``es in shard order: the index and each
    batch's bytes as they are (one piece per batch where its chunks lie back to back, issue 34), or
    None when no chunk is stored."""
    batches = [b for b in batches if len(b)]
    if not batches:
        return None
    sizes = np.concatenate([b.sizes for b in batches]).astype(np.uint64)
    where = np.concatenate([b.positions for b in batches]).astype(np.intp)
    if where.size > 1 and not (np.diff(where) > 0).all():
        raise ValueError("pack_batches: the batches' chunks are not in shard order")
    table = np.full((layout.n_inner, 2), EMPTY, dtype=np.uint64)
    table[where, 1] = sizes
    table[where, 0] = layout.data_offset + np.cumsum(sizes) - sizes
    index = memoryview(layout.encode_index(table))
    parts = [p for b in batches for p in b.parts()]
    return [index, *parts] if layout.index_location == "start" else [*parts, index]


def _byte_view(d: np.ndarray | bytes | memoryview) -> memoryview:
    """A 1-D byte memoryview of ``d``, without a copy when it is contiguous."""
    if isinstance(d, np.ndarray):
        if d.dtype == np.uint8 and d.ndim == 1 and d.flags.c_contiguous:
            return d.data
        return np.ascontiguousarray(d).data.cast("B")
    view = memoryview(d)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def pack(layout: ShardLayout, chunks: Iterable[tuple[int, np.ndarray | bytes | memoryview]]) -> bytes | None:
    """The bytes of a packed shard: chunks in C order, then (or before) the index.

    chunks : ``(i, data)`` for the non-empty inner chunks. Returns None when there are none.
    """
    parts = pack_parts(layout, chunks)
    return None if parts is None else b"".join(parts)


def write_packed(path: str | os.PathLike[str], data: bytes | np.ndarray | Sequence[memoryview] | None,
                 tmp_dir: str | os.PathLike[str] | None = None) -> int:
    """Atomically replace the shard file ``path`` with ``data`` (bytes, or the pieces of
    ``pack_parts``; None: remove it). Returns bytes written.

    The temporary file is written in ``tmp_dir`` (same filesystem), else next to ``path``.
    """
    path = Path(path)
    if data is None:
        path.unlink(missing_ok=True)
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [_byte_view(data)] if isinstance(data, bytes | bytearray | memoryview | np.ndarray) else [_byte_view(p) for p in data]
    # no fsync: one per shard would cost the write throughput; as durable as zarr-python's own writes
    return atomic_write(path, parts, fsync=False, tmp_dir=tmp_dir)


# -- reading and compaction --------------------------------------------------------------------------


def check_table(table: np.ndarray, layout: ShardLayout, file_size: int, key: str) -> np.ndarray:
    """Check an index table against its file; returns ``table``.

    Every entry is either empty — exactly ``(2^64-1, 2^64-1)`` — or a non-empty byte range
    lying wholly inside the chunk data region of the file, clear of the index. Raises
    ShardIndexError naming ``key`` and the first bad inner chunk otherwise (half-empty entries,
    zero lengths, ranges past the end, ranges into the index region).
    """
    n = layout.index_nbytes
    off_empty, len_empty = table[:, 0] == EMPTY, table[:, 1] == EMPTY
    half = off_empty != len_empty
    if half.any():
        j = int(np.argmax(half))
        raise ShardIndexError(key, f"index entry of inner chunk {j} (offset {int(table[j, 0])}, {int(table[j, 1])} bytes) is "
                                   "half empty: an empty chunk has 2^64-1 for both")
    used = ~off_empty
    if used.any():
        lo, hi = (n, file_size) if layout.index_location == "start" else (0, file_size - n)
        starts, lengths = table[used, 0], table[used, 1]
        bad = (starts < lo) | (lengths == 0) | (lengths > np.uint64(hi)) | (starts > np.uint64(hi) - lengths)
        if bad.any():
            j = int(np.flatnonzero(used)[np.argmax(bad)])
            raise ShardIndexError(
                key,
                f"index entry of inner chunk {j} (offset {int(table[j, 0])}, {int(table[j, 1])} bytes) "
                f"lies outside the chunk data [{lo}, {hi}) of the {file_size}-byte file",
            )
    return table


def _index_bytes(f: BinaryIO, layout: ShardLayout, size: int, key: str) -> bytes:
    n = layout.index_nbytes
    if size < n:
        raise ShardIndexError(key, f"file has {size} bytes, fewer than its {n}-byte index (truncated or empty shard)")
    f.seek(size - n if layout.index_location == "end" else 0)
    return f.read(n)


def read_index(path: str | os.PathLike[str], layout: ShardLayout, key: str | None = None) -> np.ndarray:
    """The ``(n_inner, 2)`` uint64 index table of the shard file ``path``.

    Raises ShardIndexError naming the shard when the file is shorter than its index (an empty
    file included), the index does not decode, or an entry is not valid (``check_table``).
    """
    return read_index_stat(path, layout, key)[0]


def read_index_stat(path: str | os.PathLike[str], layout: ShardLayout, key: str | None = None) -> tuple[np.ndarray, os.stat_result]:
    """``read_index`` and the ``os.stat_result`` of the file the index was read from (its
    ``st_ino`` tells whether a later open finds the same file or a replacement)."""
    from zopt.store.chunk_file import open_regular

    key = key or os.fspath(path)
    fd, st = open_regular(path, key)  # a FIFO or a device under the shard's name: refused before any read
    with os.fdopen(fd, "rb") as f:
        raw = _index_bytes(f, layout, st.st_size, key)
    return check_table(layout.decode_index(raw, key), layout, st.st_size, key), st


def read_shard(path: str | os.PathLike[str], layout: ShardLayout, key: str | None = None) -> tuple[np.ndarray, bytes]:
    """``(index table, whole file)`` of a shard read with one ``read``: the index and the chunk
    bytes come from the same file even if it is replaced meanwhile. Errors as ``read_index``."""
    from zopt.store.chunk_file import open_regular

    key = key or os.fspath(path)
    fd, _ = open_regular(path, key)
    with os.fdopen(fd, "rb") as f:
        blob = f.read()
    return shard_table(blob, layout, key), blob


def shard_table(blob: bytes, layout: ShardLayout, key: str) -> np.ndarray:
    """The checked index table of the whole shard ``blob`` (from a file or a store key ``key``).
    Errors as ``read_index``."""
    n = layout.index_nbytes
    if len(blob) < n:
        raise ShardIndexError(key, f"file has {len(blob)} bytes, fewer than its {n}-byte index (truncated or empty shard)")
    raw = blob[len(blob) - n :] if layout.index_location == "end" else blob[:n]
    return check_table(layout.decode_index(raw, key), layout, len(blob), key)


#: most padding bytes a safe rewrite (``zopt.store.rewrite.place``) puts before one inner chunk
PAD_LIMIT = 64


def is_packed(table: np.ndarray, layout: ShardLayout) -> bool:
    """True when the chunks of ``table`` lie back to back from ``data_offset``, in any order,
    with at most ``PAD_LIMIT`` bytes of padding before each (whatever follows the last one)."""
    used = np.flatnonzero(table[:, 0] != EMPTY)
    if used.size == 0:
        return True
    starts, lengths = table[used, 0].astype(np.int64), table[used, 1].astype(np.int64)
    order = np.argsort(starts, kind="stable")
    s, ln = starts[order], lengths[order]
    gaps = np.diff(np.concatenate(([layout.data_offset], s))) - np.concatenate(([0], ln[:-1]))
    return bool(np.all((gaps >= 0) & (gaps <= PAD_LIMIT)))


def classify(table: np.ndarray, layout: ShardLayout, file_size: int) -> str:
    """``"fixed-slot"``, ``"compact"``, ``"empty"`` or ``"other"`` for one shard.

    table : its ``(n_inner, 2)`` index; file_size : its file's size in bytes. ``compact``: packed
    (``is_packed``) and no bytes after the last chunk but the index; such a shard is
    ``compact`` even if its chunks also sit at their slot offsets.
    """
    used = np.flatnonzero(table[:, 0] != EMPTY)
    if used.size == 0:
        return "empty"
    starts, lengths = table[used, 0], table[used, 1]
    data_end = file_size - (layout.index_nbytes if layout.index_location == "end" else 0)
    if is_packed(table, layout) and int((starts + lengths).max()) == data_end:
        return "compact"
    try:
        slot = layout.slot_size
    except ValueError:
        return "other"
    fixed = np.all(starts == np.uint64(layout.data_offset) + used.astype(np.uint64) * np.uint64(slot))
    return "fixed-slot" if fixed and np.all(lengths <= slot) else "other"


def allocated_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes the file occupies on disk (``st_blocks * 512``; less than its size when sparse)."""
    return stat_allocated(os.stat(path))


def stat_allocated(st: os.stat_result) -> int:
    """``allocated_bytes`` of a file from its ``os.stat`` result."""
    return int(getattr(st, "st_blocks", 0)) * 512 or st.st_size
