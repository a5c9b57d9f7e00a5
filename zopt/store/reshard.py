"""Re-sharding without recompressing: a source array's encoded chunks copied into the target's shards.

When a target array's inner chunks and inner codec chain equal the source array's chunks and
chain (issue 34 G5) — a local Zarr v3 source of many small chunk files sharded with the same
codecs, or a sharded source re-sharded with the same inner chunks — every inner chunk of the
target is, byte for byte, a chunk the source already stores: ``ChunkCopier.chunks`` reads those
bytes (one file per chunk, or ranges of the source shards through their checked index) and the
shard writers (``zopt.job.tasks``) pack them into the same layout as the encoding path, with the
same journal markers. Nothing is decoded and encoded again; missing source chunks stay missing
(the fill value). Where the chain's last codec (before a ``crc32c``) is ``conditional``, each
chunk's mask is read from its header, so the report's mask histogram is the usual one.

How the bytes are checked on the way (a corrupt chunk is a ``ChunkDecodeError`` naming the chunk
key and the source store; nothing that does not decode is published):

- every chunk file is opened without waiting and refused unless it is a regular file of at most
  the chain's bound on one encoded chunk, and refused when its size changes while it is read
  (``zopt.store.chunk_file``); every chunk is checked to be non-empty, no longer than that bound,
  and exactly one chunk's bytes for a chain that keeps the size (``[bytes]``, ``[bytes, shuffle]``);
- **crc32c**: when the chain ends with ``crc32c`` (``--checksum``), every chunk's checksum is
  verified (about 10 GB/s);
- **every chunk decoded**, on the very bytes that are copied (a chunk rewritten during the read is
  checked as it was read): where the chain's last codec (before a ``crc32c``) is ``zstd`` after
  codecs that keep the size (``bytes``, ``shuffle``), the zstd bytes are decoded into a buffer of
  one chunk with the library numcodecs bundles (``zopt.compat.libzstd``, the GIL released): the
  frames' structure, declared content size and checksum (where a frame has one) checked by zstd
  itself, and several frames or skippable frames read as zarr-python reads them; any other chain
  is decoded through its codecs. The decode is most of the copy's cost: on ``benchmarks/reshard.py``
  (noisy float32 that zstd barely compresses, a busy 2-core machine) the copy runs 1.8-2.0x a
  recompress, where a decode of one chunk in 8 ran 4-5x and published chunks that did not decode.

Spec: Zarr v3 core, ``sharding_indexed`` (the chunk bytes of a shard are the inner chain's
encoding of each inner chunk, exactly what an unsharded array with that chain stores per chunk).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from zopt.codecs.bounded import zstd_content_size  # RFC 8878 §3.1.1.1, named in the errors
from zopt.codecs.chain import ChunkEncoder, EncodedChunk
from zopt.codecs.conditional import ConditionalCodec, conditional_codecs_in, parse_header
from zopt.compat import libzstd
from zopt.compat.zarr_compat import regular_chunk_shape
from zopt.errors import ChunkDecodeError
from zopt.store.chunk_file import CHANGED, open_regular, pread_into, read_chunk_file, too_large
from zopt.store.shards import EMPTY, ShardLayout, layout_of, read_index

__all__ = ["ChunkCopier", "same_chain"]

_ZSTD_MAGIC = 0xFD2FB528
#: bytes a chunk file may hold beyond the chain's bound on one encoded chunk before it is refused unread
_HEADROOM = 1024


def same_chain(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """True when two zarr codec lists have the same JSON (names and every configuration field)."""
    return len(a) == len(b) and all(x.to_dict() == y.to_dict() for x, y in zip(a, b, strict=True))


_local = threading.local()


def _scratch(nbytes: int) -> np.ndarray:
    """This thread's buffer of ``nbytes`` that a copied chunk is decoded into (and dropped)."""
    buf = getattr(_local, "scratch", None)
    if buf is None or buf.size != nbytes:
        buf = _local.scratch = np.empty(nbytes, dtype=np.uint8)
    return buf


def _zstd_why(frame: np.ndarray, nbytes: int, exc: BaseException) -> str:
    """Why the zstd bytes ``frame`` of a chunk of ``nbytes`` do not decode, in words: what its
    header declares where that is the fault, else zstd's own error."""
    try:
        size = zstd_content_size(frame)
    except ValueError:
        size = None
    if size is not None and size != nbytes and frame.size >= 4 and int.from_bytes(frame[:4].tobytes(), "little") == _ZSTD_MAGIC:
        return f"zstd frame holds {size} bytes, a chunk {nbytes}"
    return str(exc)


@functools.lru_cache(maxsize=16)
def _encoder(layout: ShardLayout) -> ChunkEncoder:
    return layout.inner_encoder()


def _encoder_of(layout: ShardLayout) -> ChunkEncoder:
    try:  # built once per process and layout
        return _encoder(layout)
    except TypeError:  # an unhashable codec
        return layout.inner_encoder()


@dataclass(frozen=True)
class ChunkCopier:
    """Copies one source array's encoded chunks into target shards (see module docstring).

    root, name : the local source store and the array's path in it.
    source_layout : the source's ``ShardLayout``, or None when its chunks are files of their own.
    key_encoding : the source's zarr ``ChunkKeyEncoding`` (of its chunks, or of its shards).
    check : ``"crc32c"`` (checked and decoded) or ``"decoded"``.
    header : ``(header_bits, number of codecs)`` of the chain's ``conditional`` codec when it is the
    last codec (before a ``crc32c``), so that each stored chunk starts with its header: every
    chunk's mask is read from it for the report (and its reserved bits checked); else None.
    zstd : None, or when the chain's last codec (before a ``crc32c``) is ``zstd``: the bytes of one
    chunk where the codecs before it keep the size, else -1 (frame header read, size not known).
    Build with ``open``; picklable (sent to distributed workers with the shard job).
    """

    root: str
    name: str
    source_layout: ShardLayout | None
    key_encoding: Any
    check: str
    header: tuple[int, int] | None = None
    zstd: int | None = None  # the chain's last codec (before a crc32c) is zstd: -1, or the bytes each frame holds
    exact: int | None = None  # every codec keeps the size (``bytes``, ``shuffle``, ``crc32c``): each chunk's bytes

    @classmethod
    def open(cls, src: str, name: str, target: ShardLayout) -> ChunkCopier | None:
        """A copier when array ``name`` of the local Zarr v3 store ``src`` (a path; a URL: None) has the target's data
        type, fill value, inner chunk shape (regular grid) and inner codec JSON, chunked or
        sharded; otherwise None (the job encodes as usual)."""
        import zarr
        from zarr.codecs import Crc32cCodec, ZstdCodec

        if "://" in src or not os.path.isfile(os.path.join(src, name, "zarr.json")):
            return None
        try:
            array = zarr.open_array(src, path=name, mode="r")
        except Exception:  # noqa: BLE001 - anything zarr cannot open is encoded the general way
            return None
        from zarr.core.metadata import ArrayV3Metadata

        meta = array.metadata
        if not isinstance(meta, ArrayV3Metadata) or meta.data_type != target.dtype:
            return None
        native = meta.data_type.to_native_dtype()
        if np.asarray(meta.fill_value, native).tobytes() != np.asarray(target.fill_value, native).tobytes():
            return None  # a missing chunk would read as another value
        source_layout = layout_of(array)
        if source_layout is None:
            inner, codecs = regular_chunk_shape(meta), tuple(meta.codecs)
        else:
            inner, codecs = source_layout.inner_shape, source_layout.inner_codecs
            if regular_chunk_shape(meta) is None:
                return None
        if inner != tuple(target.inner_shape) or not same_chain(codecs, tuple(target.inner_codecs)):
            return None
        crc = bool(codecs) and isinstance(codecs[-1], Crc32cCodec)
        outer = codecs[-2 if crc else -1] if len(codecs) > (1 if crc else 0) else None
        header = None
        if isinstance(outer, ConditionalCodec) and len(conditional_codecs_in(codecs)) == 1:
            header = (outer.header_bits, len(outer.codecs))
        zstd = None
        if isinstance(outer, ZstdCodec):
            keep = all(type(c).__name__ in ("BytesCodec", "ShuffleCodec") for c in codecs[: -2 if crc else -1])
            zstd = int(np.prod(inner)) * native.itemsize if keep else -1
        exact = None
        if all(type(c).__name__ in ("BytesCodec", "ShuffleCodec") for c in codecs[: -1 if crc else None]):
            exact = int(np.prod(inner)) * native.itemsize + (4 if crc else 0)
        return cls(os.fspath(src), name, source_layout, meta.chunk_key_encoding, "crc32c" if crc else "decoded",
                   header, zstd, exact)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, self.name, *key.split("/"))

    def _where(self, key: str) -> str:
        return f"{self.name}/{key}" if self.name else key

    def chunks(self, layout: ShardLayout, shard_coords: tuple[int, ...], shape: tuple[int, ...],
               rows: tuple[int, int] | None = None, axis: int = 0) -> Iterator[tuple[int, EncodedChunk]]:
        """``(i, EncodedChunk)`` (with its mask where ``header`` is known) for the inner chunks of target shard ``shard_coords``
        (``layout``, array ``shape``) the source stores, checked; with ``rows`` only those whose
        position along ``axis`` in the shard is in ``[rows[0], rows[1])``.

        Raises ChunkDecodeError naming the source chunk key (and the inner chunk of a source
        shard) and the source store; ShardIndexError for a corrupt source shard index.
        """
        try:
            bound = layout.slot_size
        except ValueError:
            bound = None
        # the most bytes a source chunk file may hold: the chain's bound (unknown: 4x the raw chunk) and headroom
        raw = int(np.prod(layout.inner_shape)) * np.dtype(layout.dtype.to_native_dtype()).itemsize
        limit = (bound if bound is not None else 4 * raw) + _HEADROOM
        tables: dict[tuple[int, ...], tuple[np.ndarray, str]] = {}
        cps = layout.chunks_per_shard
        for i, index, _, _ in layout.inner_chunk_items(shard_coords, shape):
            if rows is not None and not rows[0] <= index[axis] - shard_coords[axis] * cps[axis] < rows[1]:
                continue
            found = self._read(index, tables, limit)
            if found is None:
                continue
            data, key, inner = found
            self._check(layout, data, key, inner, bound)
            yield i, EncodedChunk(data, self._masks(data, key, inner))

    def _masks(self, data: np.ndarray, key: str, inner: tuple[int, ...] | None) -> tuple[int, ...]:
        if self.header is None:
            return ()
        try:
            return (parse_header(data, *self.header),)
        except ValueError as exc:  # reserved bits set, or shorter than the header
            raise ChunkDecodeError(key, inner, exc, codec="conditional", store=self.root) from exc

    def _read(self, index: tuple[int, ...], tables: dict[tuple[int, ...], Any], limit: int
              ) -> tuple[np.ndarray, str, tuple[int, ...] | None] | None:
        """The stored bytes of source chunk ``index`` (None when absent), its key and inner position.
        A chunk file that is not a regular file, or larger than ``limit`` bytes, is refused unread
        (``zopt.store.chunk_file``)."""
        sl = self.source_layout
        if sl is None:
            key = self.key_encoding.encode_chunk_key(index)
            try:
                data = read_chunk_file(self._path(key), limit, self._where(key), self.root)
            except FileNotFoundError:
                return None
            return data, self._where(key), None
        cps = sl.chunks_per_shard
        shard = tuple(c // n for c, n in zip(index, cps, strict=True))
        inner = tuple(c % n for c, n in zip(index, cps, strict=True))
        if shard not in tables:
            key = self.key_encoding.encode_chunk_key(shard)
            try:
                tables[shard] = (read_index(self._path(key), sl, self._where(key)), key)
            except FileNotFoundError:
                tables[shard] = (None, key)
        table, key = tables[shard]
        if table is None:
            return None
        offset, nbytes = table[int(np.ravel_multi_index(inner, cps))]
        if offset == EMPTY:
            return None
        if int(nbytes) > limit:
            raise ChunkDecodeError(self._where(key), inner, too_large(int(nbytes), limit), store=self.root)
        fd, _ = open_regular(self._path(key), self._where(key), self.root)
        data = np.empty(int(nbytes), dtype=np.uint8)
        try:
            got = pread_into(fd, data, int(offset))
        finally:
            os.close(fd)
        if got != data.size:
            raise ChunkDecodeError(self._where(key), inner, f"{CHANGED}: {got} of {data.size} bytes at {offset}",
                                   store=self.root)
        return data, self._where(key), inner

    def _check(self, layout: ShardLayout, data: np.ndarray, key: str, inner: tuple[int, ...] | None,
               bound: int | None) -> None:
        def bad(why: str, codec: str | None = None) -> ChunkDecodeError:
            return ChunkDecodeError(key, inner, why, codec=codec, store=self.root)

        if data.size == 0:
            raise bad("0 bytes stored")
        if self.exact is not None and data.size != self.exact:
            raise bad(f"{data.size} bytes, a chunk of this chain {self.exact}")
        if bound is not None and data.size > bound:
            raise bad(f"{data.size} bytes, more than the chain's bound of {bound} on one encoded chunk")
        if self.check == "crc32c":
            import google_crc32c

            if data.size < 4 or google_crc32c.value(data[:-4].tobytes()) != int.from_bytes(data[-4:].tobytes(), "little"):
                raise bad("stored checksum does not match the chunk's bytes", codec="crc32c")
        # every chunk decoded, as a reader would decode it: the frame's structure, declared size and
        # checksum (zstd's, where the frame has one) all checked on the very bytes that are copied
        if self.zstd is not None and self.zstd >= 0 and libzstd.available():
            frame = data[:-4] if self.check == "crc32c" else data
            try:  # several frames and skippable frames decode, as zarr-python reads them
                libzstd.decompress_into(frame, _scratch(self.zstd), self.zstd)
            except (RuntimeError, ValueError) as exc:
                raise bad(_zstd_why(frame, self.zstd, exc), codec="zstd") from exc
            return
        try:
            _encoder_of(layout).decode(data, key=key, inner=inner)
        except ChunkDecodeError as exc:
            raise exc.in_store(key, inner, self.root) from exc

