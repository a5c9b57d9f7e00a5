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
``compact_shard`` rewrites a fixed-slot shard packed, also through a temporary file and a rename.

Only local directory stores are written here (the engine writes other stores through zarr).
"""

from __future__ import annotations

import functools
import math
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zopt._zarr_compat import endian_of, index_location_of
from zopt.codecs.chain import ChunkEncoder, chunk_spec
from zopt.codecs.sync import sync_decoder

__all__ = [
    "EMPTY",
    "ShardIndexError",
    "ShardLayout",
    "compact_shard",
    "finalize_slots",
    "layout_of",
    "read_index",
    "write_packed",
    "write_slots",
]

#: index entry of an empty inner chunk (offset and nbytes)
EMPTY = np.uint64(2**64 - 1)
TMP_MARK = ".zopt-"


class ShardIndexError(ValueError):
    """A shard's index is corrupt or does not match its file. ``key``: the shard's path."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        super().__init__(f"shard {key!r}: {reason}")


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
        from zarr.core.dtype import UInt64

        spec = chunk_spec((*self.chunks_per_shard, 2), UInt64(endianness="little"), 2**64 - 1)
        return ChunkEncoder(self.index_codecs, spec)

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
        raw = np.frombuffer(bytes(data), dtype=np.uint8)
        enc = self._index_encoder()
        try:
            for codec, s in reversed(enc.bytes_bytes):
                raw = sync_decoder(codec, s)(raw)
        except Exception as exc:
            raise ShardIndexError(key, f"index does not decode ({type(exc).__name__}: {exc})") from exc
        codec, s = enc.array_bytes
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
        cps = self.chunks_per_shard
        for i, local in enumerate(np.ndindex(*cps)):
            index = tuple(s * n + c for s, n, c in zip(shard_coords, cps, local, strict=True))
            start = [c * k for c, k in zip(index, self.inner_shape, strict=True)]
            if any(o >= n for o, n in zip(start, array_shape, strict=True)):
                continue
            region = tuple(slice(o, min(o + k, n)) for o, k, n in zip(start, self.inner_shape, array_shape, strict=True))
            yield i, index, region


def layout_of(array: Any) -> ShardLayout | None:
    """The ``ShardLayout`` of a zarr v3 array, or None when it is not sharded."""
    from zarr.codecs import ShardingCodec

    meta = array.metadata
    if getattr(meta, "zarr_format", 3) != 3:
        return None
    sharding = [c for c in meta.codecs if isinstance(c, ShardingCodec)]
    if not sharding:
        return None
    sc = sharding[0]
    return ShardLayout(
        shard_shape=tuple(meta.chunk_grid.chunk_shape),
        inner_shape=tuple(sc.chunk_shape),
        index_location=index_location_of(sc),
        index_codecs=tuple(sc.index_codecs),
        inner_codecs=tuple(sc.codecs),
        dtype=meta.data_type,
        fill_value=meta.fill_value,
    )


# -- chunk preparation --------------------------------------------------------------------------------


# -- file writing ----------------------------------------------------------------------------------


def tmp_path(path: str | os.PathLike, job: str) -> Path:
    """The temporary path a shard is assembled under before its rename."""
    return Path(f"{os.fspath(path)}{TMP_MARK}slots-{job}")


def write_slots(
    tmp: str | os.PathLike, layout: ShardLayout, chunks: Iterable[tuple[int, np.ndarray]]
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
            os.pwrite(fd, memoryview(np.ascontiguousarray(data)), layout.slot_offset(i))
            written.append((i, int(data.size)))
    finally:
        os.close(fd)
    return written


def finalize_slots(
    tmp: str | os.PathLike, path: str | os.PathLike, layout: ShardLayout, written: Iterable[tuple[int, int]]
) -> int:
    """Write the index of a fixed-slot shard and rename ``tmp`` onto ``path`` (atomic).

    written : ``(i, nbytes)`` of every inner chunk stored in ``tmp``; the others are empty.
    With none, ``tmp`` and ``path`` are removed (the shard equals the fill value).
    Returns the shard file's size in bytes (0 when removed).
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
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, index, where)
        os.ftruncate(fd, where + len(index) if layout.index_location == "end" else layout.fixed_slot_nbytes)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return os.path.getsize(path)


def pack_parts(layout: ShardLayout, chunks: Iterable[tuple[int, np.ndarray | bytes | memoryview]]) -> list[memoryview] | None:
    """The pieces of a packed shard in file order — chunks in C order, then (or before) the
    index — without joining them (``write_packed`` writes them one after the other, so a shard
    is never copied whole in memory). Same arguments and None as ``pack``."""
    items = sorted(((i, memoryview(np.ascontiguousarray(d)).cast("B") if isinstance(d, np.ndarray) else memoryview(d)) for i, d in chunks), key=lambda x: x[0])
    if not items:
        return None
    table = np.full((layout.n_inner, 2), EMPTY, dtype=np.uint64)
    offset = layout.data_offset
    for i, d in items:
        table[i] = (offset, d.nbytes)
        offset += d.nbytes
    index = memoryview(layout.encode_index(table))
    parts = [d for _, d in items]
    return [index, *parts] if layout.index_location == "start" else [*parts, index]


def pack(layout: ShardLayout, chunks: Iterable[tuple[int, np.ndarray | bytes | memoryview]]) -> bytes | None:
    """The bytes of a packed shard: chunks in C order, then (or before) the index.

    chunks : ``(i, data)`` for the non-empty inner chunks. Returns None when there are none.
    """
    parts = pack_parts(layout, chunks)
    return None if parts is None else b"".join(parts)


def write_packed(path: str | os.PathLike, data: bytes | Sequence[memoryview] | None) -> int:
    """Atomically replace the shard file ``path`` with ``data`` (bytes, or the pieces of
    ``pack_parts``; None: remove it). Returns bytes written."""
    path = Path(path)
    if data is None:
        path.unlink(missing_ok=True)
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{path}{TMP_MARK}packed-{uuid.uuid4().hex}")
    parts = [data] if isinstance(data, bytes | bytearray | memoryview) else data
    try:
        with open(tmp, "wb", buffering=0) as f:
            for part in parts:
                view = memoryview(part).cast("B")
                while view.nbytes:  # a raw write may be partial
                    view = view[f.write(view):]
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return sum(memoryview(p).nbytes for p in parts)


# -- reading and compaction --------------------------------------------------------------------------


def read_index(path: str | os.PathLike, layout: ShardLayout, key: str | None = None) -> np.ndarray:
    """The ``(n_inner, 2)`` uint64 index table of the shard file ``path``.

    Raises ShardIndexError naming the shard when the file is shorter than its index, the index
    does not decode, or an entry points outside the file.
    """
    key = key or os.fspath(path)
    size = os.path.getsize(path)
    n = layout.index_nbytes
    if size < n:
        raise ShardIndexError(key, f"file has {size} bytes, fewer than its {n}-byte index")
    with open(path, "rb") as f:
        if layout.index_location == "end":
            f.seek(size - n)
        raw = f.read(n)
    table = layout.decode_index(raw, key)
    used = table[:, 0] != EMPTY
    if used.any():
        lo, hi = (n, size) if layout.index_location == "start" else (0, size - n)
        starts, lengths = table[used, 0], table[used, 1]
        bad = (starts < lo) | (starts + lengths > hi) | (starts + lengths < starts)
        if bad.any():
            j = int(np.flatnonzero(used)[np.argmax(bad)])
            raise ShardIndexError(
                key,
                f"index entry of inner chunk {j} (offset {int(table[j, 0])}, {int(table[j, 1])} bytes) "
                f"lies outside the chunk data [{lo}, {hi}) of the {size}-byte file",
            )
    return table


def classify(table: np.ndarray, layout: ShardLayout, file_size: int) -> str:
    """``"fixed-slot"``, ``"compact"``, ``"empty"`` or ``"other"`` for one shard.

    table : its ``(n_inner, 2)`` index; file_size : its file's size in bytes. A shard with no
    unused bytes is ``compact`` even if its chunks also sit at their slot offsets.
    """
    used = np.flatnonzero(table[:, 0] != EMPTY)
    if used.size == 0:
        return "empty"
    starts, lengths = table[used, 0], table[used, 1]
    order = np.argsort(starts, kind="stable")
    s, ln = starts[order], lengths[order]
    data_end = file_size - (layout.index_nbytes if layout.index_location == "end" else 0)
    packed = bool(
        s[0] == layout.data_offset and np.all(s[1:] == s[:-1] + ln[:-1]) and int(s[-1] + ln[-1]) == data_end
    )
    if packed:
        return "compact"
    try:
        slot = layout.slot_size
    except ValueError:
        return "other"
    fixed = np.all(starts == np.uint64(layout.data_offset) + used.astype(np.uint64) * np.uint64(slot))
    return "fixed-slot" if fixed and np.all(lengths <= slot) else "other"


def allocated_bytes(path: str | os.PathLike) -> int:
    """Bytes the file occupies on disk (``st_blocks * 512``; less than its size when sparse)."""
    st = os.stat(path)
    return int(getattr(st, "st_blocks", 0)) * 512 or st.st_size


def compact_shard(
    path: str | os.PathLike, layout: ShardLayout, key: str | None = None, table: np.ndarray | None = None
) -> dict[str, int]:
    """Rewrite one shard file packed (chunks in C order), atomically; bytes copied unchanged.

    table : the shard's index if the caller has read it already (``read_index``).
    Returns apparent and allocated sizes before and after (bytes):
    ``{"apparent_before", "allocated_before", "apparent_after", "allocated_after"}``.
    Raises ShardIndexError naming the shard when its index is inconsistent.
    """
    before = (os.path.getsize(path), allocated_bytes(path))
    if table is None:
        table = read_index(path, layout, key)
    used = np.flatnonzero(table[:, 0] != EMPTY)
    with open(path, "rb") as f:
        blob = f.read()
    view = memoryview(blob)
    data = pack(layout, ((int(i), view[int(table[i, 0]) : int(table[i, 0] + table[i, 1])]) for i in used))
    write_packed(path, data)
    after = (os.path.getsize(path), allocated_bytes(path)) if data is not None else (0, 0)
    return {
        "apparent_before": before[0],
        "allocated_before": before[1],
        "apparent_after": after[0],
        "allocated_after": after[1],
    }
