"""A codec pipeline that tells codecs which chunk they are encoding.

zarr-python's codec API hands a codec the chunk's bytes and an ``ArraySpec`` but not the chunk's
position in the chunk grid. The ``conditional`` codec's decision functions need it
(``chunk_index`` in ``../shared/specs/optional.md``, Phase 2), and error messages need the chunk
key. ``ChunkIndexCodecPipeline`` is zarr's ``BatchedCodecPipeline`` plus one thing: around the
write and read of every chunk it sets a context variable holding the chunk's store key and its
coordinates. Because the ``sharding_indexed`` codec builds its inner pipeline with
``get_pipeline_class()``, the same class runs for the inner chunks of a shard, and composes
the coordinates: an inner chunk's ``chunk_index`` is its position in the array's inner-chunk
grid, ``shard_coords * chunks_per_shard + coords_in_shard``.

zopt selects this pipeline through zarr's ``codec_pipeline.path`` configuration inside its own
jobs, or everywhere after ``zopt.use_pipeline()`` (``zopt.codecs.zarr_config``; importing zopt
selects nothing), and only when that setting still names zarr's default ``BatchedCodecPipeline``:
a pipeline the user chose (e.g. zarrs) is kept, and then ``chunk_index`` is ``None``.

Chunk keys are parsed from the store path: the last ``ndim`` integer fields split on ``/`` and
``.``, which covers the ``default`` and ``v2`` chunk key encodings with either separator.
"""

from __future__ import annotations

import asyncio
import functools
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from zarr.core.codec_pipeline import BatchedCodecPipeline
from zarr.registry import register_pipeline

from zopt.codecs.bounded import decode_within, decoded_limit
from zopt.codecs.bytes import as_zopt_bytes
from zopt.codecs.context import (
    ChunkContext,
    chunk_context,
    current_chunk,
    current_chunk_index,
    describe_current_chunk,
    restore_current_chunk,
    set_current_chunk,
)
from zopt.codecs.grid import is_fill
from zopt.codecs.sync import numcodec_of
from zopt.compat.zarr_compat import (
    chunk_result,
    fill_value_or_default,
    joined_results,
    supports_sync,
)
from zopt.errors import ChunkDecodeError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from zarr.abc.codec import Codec
    from zarr.abc.store import Store
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.metadata import ArrayMetadata, ArrayV3Metadata

    from zopt.compat.zarr_compat import SyncCodec

__all__ = [
    "ChunkContext",
    "ChunkIndexCodecPipeline",
    "current_chunk",
    "current_chunk_index",
    "describe_current_chunk",
    "chunk_context",
    "validate_codec_chain",
]


_SPLIT = re.compile(r"[/.]")


def _coords_from_key(key: str, ndim: int) -> tuple[int, ...] | None:
    if ndim == 0:
        return ()
    fields = _SPLIT.split(key)[-ndim:]
    if len(fields) != ndim or not all(f.isdigit() for f in fields):
        return None
    return tuple(int(f) for f in fields)


def _context_for(byte_io: object, chunk_shape: tuple[int, ...]) -> ChunkContext:
    parent = current_chunk()
    local = getattr(byte_io, "chunk_coords", None)
    if local is not None:  # an inner chunk handed out by sharding_indexed
        local = tuple(int(c) for c in local)
        if parent is None:
            return ChunkContext("<shard>", local, chunk_shape, local)
        coords = None
        if parent.coords is not None and len(parent.shape) == len(chunk_shape):
            per_shard = [s // c for s, c in zip(parent.shape, chunk_shape, strict=True)]
            coords = tuple(
                p * n + c for p, n, c in zip(parent.coords, per_shard, local, strict=True)
            )
        return ChunkContext(parent.key, coords, chunk_shape, local)
    key = str(getattr(byte_io, "path", byte_io))
    return ChunkContext(key, _coords_from_key(key, len(chunk_shape)), chunk_shape)


def validate_codec_chain(metadata: ArrayV3Metadata) -> None:
    """Resolve the array's chunk spec through its codecs (into shards' inner chains).

    metadata : zarr ``ArrayV3Metadata``. Raises the first codec's ValueError, e.g. a fill value
    that ``scale_offset`` or ``cast_value`` cannot encode (spec: the fill value is transformed
    through the codecs and must round-trip).
    """
    from zarr.abc.codec import ArrayArrayCodec
    from zarr.codecs.sharding import ShardingCodec
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype

    shape = getattr(metadata.chunk_grid, "chunk_shape", metadata.shape)
    spec = ArraySpec(shape=tuple(shape), dtype=metadata.data_type, fill_value=metadata.fill_value,
                     config=ArrayConfig.from_dict({}), prototype=default_buffer_prototype())

    def walk(codecs: Iterable[Codec], spec: ArraySpec) -> None:
        for codec in codecs:
            if isinstance(codec, ShardingCodec):
                walk(codec.codecs, replace(spec, shape=tuple(codec.chunk_shape)))
                return
            if not isinstance(codec, ArrayArrayCodec):
                return
            spec = codec.resolve_metadata(spec)

    walk(metadata.codecs, spec)


def _fill_array(chunk_spec: ArraySpec) -> np.ndarray:
    return np.full((), fill_value_or_default(chunk_spec), dtype=chunk_spec.dtype.to_native_dtype())


class _SyncChain(NamedTuple):
    """A chain whose every codec runs synchronously (``ChunkIndexCodecPipeline``'s fast path)."""

    array_array: tuple[SyncCodec[NDBuffer, NDBuffer], ...]
    array_bytes: SyncCodec[NDBuffer, Buffer]
    bytes_bytes: tuple[SyncCodec[Buffer, Buffer], ...]


class ChunkIndexCodecPipeline(BatchedCodecPipeline):
    """zarr's ``BatchedCodecPipeline`` that publishes each chunk's key and grid coordinates.

    Batches are processed one chunk per asyncio task (zarr's default
    ``codec_pipeline.batch_size`` is already 1). Decoding failures are re-raised as
    ``zopt.errors.ChunkDecodeError`` naming the chunk key (and the inner chunk, for shards).

    Fast path: when every codec of the chain has zarr's synchronous ``_encode_sync`` /
    ``_decode_sync`` (``bytes``, ``packbits``, ``reshape``, ``scale_offset``, ``cast_value``,
    ``transpose``, ``zstd``, ``gzip``, ``blosc``, ``crc32c``; not ``sharding_indexed``), a
    chunk is encoded or decoded by one call in a worker thread, the whole chain at once,
    instead of one event-loop hop per codec. A write of a whole chunk that equals the fill
    value *bit for bit* is not stored (with ``write_empty_chunks`` false, as zarr does); unlike
    zarr's value comparison, a chunk of ``-0.0`` under fill value ``0.0`` is kept, so it reads
    back as written. Partial-chunk writes and other chains take zarr's own path.
    """

    @classmethod
    def from_codecs(cls, codecs: Iterable[Any], *, batch_size: int | None = None) -> Any:
        # zarr's create_array instantiates zarr's own BytesCodec; run zopt's subclass instead,
        # which is identical for core types and handles zopt's data types.
        # A Zarr v2 array's compressor decodes within the chunk's size (zopt.codecs.bounded).
        return super().from_codecs(
            tuple(_bounded_v2(as_zopt_bytes(c)) for c in codecs), batch_size=batch_size
        )

    @classmethod
    def from_array_metadata_and_store(cls, array_metadata: ArrayMetadata, store: Store) -> Any:
        # zarr builds the pipeline when it creates or opens an array: the place to check
        # that the fill value passes every array→array codec (scale_offset, cast_value).
        from zarr.core.metadata.v3 import ArrayV3Metadata

        if not isinstance(array_metadata, ArrayV3Metadata):
            raise NotImplementedError
        validate_codec_chain(array_metadata)
        return cls.from_codecs(array_metadata.codecs)

    def _sync_codecs(self) -> _SyncChain | None:
        """The codecs when every one encodes and decodes synchronously (the fast path applies).

        ``sharding_indexed`` never takes the fast path, even where zarr (3.3+) gives it
        synchronous methods: those encode inner chunks through zarr's ``ChunkTransform``,
        which would not publish each inner chunk's coordinates to ``conditional`` decisions.
        """
        from zarr.codecs.sharding import ShardingCodec

        aa = [c for c in self.array_array_codecs if supports_sync(c) and not isinstance(c, ShardingCodec)]
        bb = [c for c in self.bytes_bytes_codecs if supports_sync(c) and not isinstance(c, ShardingCodec)]
        ab = self.array_bytes_codec
        if len(aa) < len(self.array_array_codecs) or len(bb) < len(self.bytes_bytes_codecs) \
                or isinstance(ab, ShardingCodec) or not supports_sync(ab):
            return None
        return _SyncChain(tuple(aa), ab, tuple(bb))

    @functools.cached_property
    def _sync_chain(self) -> bool:
        """True when the fast path applies (``_sync_codecs``)."""
        return self._sync_codecs() is not None

    @functools.cached_property
    def _sync(self) -> _SyncChain:
        """``_sync_codecs``, for the fast path (taken only where ``_sync_chain``)."""
        chain = self._sync_codecs()
        if chain is None:
            raise RuntimeError("the fast path runs only chains whose every codec is synchronous")
        return chain

    def _specs(self, chunk_spec: ArraySpec) -> tuple[list[ArraySpec], ArraySpec, list[ArraySpec]]:
        """The spec each codec sees, resolved once per distinct chunk spec (resolving runs e.g.
        cast_value's fill-value round trip, too costly for every chunk)."""
        cache = self.__dict__.setdefault("_spec_cache", {})
        try:
            return cache[chunk_spec]
        except TypeError:  # an unhashable spec: resolve every time
            return self._resolve_specs(chunk_spec)
        except KeyError:
            cache[chunk_spec] = specs = self._resolve_specs(chunk_spec)
            return specs

    def _resolve_specs(self, chunk_spec: ArraySpec) -> tuple[list[ArraySpec], ArraySpec, list[ArraySpec]]:
        aa = []
        spec = chunk_spec
        for codec in self.array_array_codecs:
            aa.append(spec)
            spec = codec.resolve_metadata(spec)
        ab = spec
        spec = self.array_bytes_codec.resolve_metadata(spec)
        bb = []
        for bb_codec in self.bytes_bytes_codecs:
            bb.append(spec)
            spec = bb_codec.resolve_metadata(spec)
        return aa, ab, bb

    def _limits(self, ab_spec: ArraySpec, bb_specs: list[ArraySpec]) -> list[int | None]:
        """Most bytes each bytes→bytes codec's decoding may yield: the array→bytes codec's
        encoded size of the chunk, grown by each codec's largest output (``bytes_bound``)."""
        from zopt.codecs.bounded import bytes_bound, raw_nbytes

        try:
            n: int | None = int(self.array_bytes_codec.compute_encoded_size(raw_nbytes(ab_spec), ab_spec))
        except (NotImplementedError, AttributeError, TypeError, ValueError):
            n = None
        out = []
        for codec, spec in zip(self.bytes_bytes_codecs, bb_specs, strict=True):
            out.append(n)
            n = None if n is None else bytes_bound(codec, n, spec)
        return out

    def _encode_whole_chunk(self, chunk: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        """The stored bytes of one whole chunk (an NDBuffer), or None when nothing is stored."""
        if not chunk_spec.config.write_empty_chunks and is_fill(chunk.as_numpy_array(), _fill_array(chunk_spec)):
            return None
        aa_codecs, ab_codec, bb_codecs = self._sync
        aa_specs, ab_spec, bb_specs = self._specs(chunk_spec)
        value: NDBuffer | None
        for codec, spec in zip(aa_codecs, aa_specs, strict=True):
            value = codec._encode_sync(chunk, spec)
            if value is None:
                return None
            chunk = value
        data = ab_codec._encode_sync(chunk, ab_spec)
        for bb_codec, spec in zip(bb_codecs, bb_specs, strict=True):
            if data is None:
                return None
            data = bb_codec._encode_sync(data, spec)
        return data

    def _decode_chunk(self, data: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        aa_codecs, ab_codec, bb_codecs = self._sync
        aa_specs, ab_spec, bb_specs = self._specs(chunk_spec)
        limits = self._limits(ab_spec, bb_specs) if bb_codecs else ()
        for bb_codec, spec, limit in zip(reversed(bb_codecs), reversed(bb_specs), reversed(limits), strict=True):
            data = decode_within(bb_codec, numcodec_of(bb_codec) if limit is not None else None, data, spec, limit)
        chunk = ab_codec._decode_sync(data, ab_spec)
        for codec, spec in zip(reversed(aa_codecs), reversed(aa_specs), strict=True):
            chunk = codec._decode_sync(chunk, spec)
        return chunk

    async def _write_whole_chunk(self, item: tuple[Any, ...], value: NDBuffer) -> None:
        # write_batch returns None on every zarr version: no per-chunk results to build
        byte_setter, chunk_spec, _, out_selection = item[:4]
        encoded = await asyncio.to_thread(self._encode_whole_chunk, value[out_selection], chunk_spec)
        if encoded is None:
            await byte_setter.delete()
        else:
            await byte_setter.set(encoded)

    def _whole_chunk_write(self, item: tuple[Any, ...], value: NDBuffer, drop_axes: tuple[int, ...]) -> bool:
        if not self._sync_chain or drop_axes or len(item) < 5 or not item[4]:
            return False
        chunk_spec, out_selection = item[1], item[3]
        return len(value.shape) == len(chunk_spec.shape) and value[out_selection].shape == tuple(chunk_spec.shape)

    async def write_batch(
        self, batch_info: Iterable[tuple[Any, ...]], value: NDBuffer, drop_axes: tuple[int, ...] = ()
    ) -> Any:
        items = list(batch_info)
        if len(items) != 1:
            # one task per chunk, so each gets its own context
            return joined_results(
                await asyncio.gather(*(self.write_batch([i], value, drop_axes) for i in items))
            )
        byte_setter, chunk_spec = items[0][0], items[0][1]
        previous = set_current_chunk(_context_for(byte_setter, tuple(chunk_spec.shape)))
        try:
            if self._whole_chunk_write(items[0], value, drop_axes):
                await self._write_whole_chunk(items[0], value)
                return None
            return await super().write_batch(items, value, drop_axes)
        finally:
            restore_current_chunk(previous)

    async def _read_chunk(self, item: tuple[Any, ...], out: NDBuffer, drop_axes: tuple[int, ...]) -> Any:
        """Read, decode and place one chunk; returns zarr's per-chunk result (see
        ``zopt.compat.zarr_compat.chunk_result``)."""
        byte_getter, chunk_spec, chunk_selection, out_selection = item[:4]
        data = await byte_getter.get(prototype=chunk_spec.prototype)
        if data is None:
            out[out_selection] = _fill_array(chunk_spec)
            return chunk_result(False)

        def place() -> None:
            chunk = self._decode_chunk(data, chunk_spec)[chunk_selection]
            if drop_axes:
                chunk = chunk.squeeze(axis=drop_axes)
            out[out_selection] = chunk

        await asyncio.to_thread(place)
        return chunk_result(True)

    async def read_batch(
        self, batch_info: Iterable[tuple[Any, ...]], out: NDBuffer, drop_axes: tuple[int, ...] = ()
    ) -> Any:
        items = list(batch_info)
        if len(items) != 1:
            return joined_results(
                await asyncio.gather(*(self.read_batch([i], out, drop_axes) for i in items))
            )
        byte_getter, chunk_spec = items[0][0], items[0][1]
        ctx = _context_for(byte_getter, tuple(chunk_spec.shape))
        previous = set_current_chunk(ctx)
        limit = decoded_limit.set(_raw_nbytes_or_none(chunk_spec))
        try:
            if self._sync_chain and not self.supports_partial_decode:
                result = await self._read_chunk(items[0], out, drop_axes)
                return None if result is None else (result,)
            return await super().read_batch(items, out, drop_axes)
        except ChunkDecodeError:
            raise
        except Exception as exc:
            raise ChunkDecodeError(ctx.key, ctx.coords_in_shard, self._cause(exc)) from exc
        finally:
            decoded_limit.reset(limit)
            restore_current_chunk(previous)

    def _cause(self, exc: Exception) -> Exception | str:
        """``exc``, or its text naming the package to install when a codec of this chain lacks
        its Python package (``zopt.compat.zarr_compat.CODEC_PACKAGES``: pcodec on a reader without it)."""
        from zopt.compat.zarr_compat import missing_codec_package

        codecs: tuple[Codec, ...] = (*self.array_array_codecs, self.array_bytes_codec, *self.bytes_bytes_codecs)
        for codec in codecs:
            try:
                name = str(codec.to_dict()["name"])
            except Exception:  # noqa: BLE001 - a codec without to_dict names nothing
                continue
            package = missing_codec_package(name)
            if package is not None:
                return f"{type(exc).__name__}: {exc} (codec {name!r} needs the Python package {package!r}: pip install {package})"
        return exc


def _raw_nbytes_or_none(spec: ArraySpec) -> int | None:
    from zopt.codecs.bounded import raw_nbytes

    try:
        return raw_nbytes(spec)
    except (AttributeError, TypeError, ValueError):
        return None


def _bounded_v2(codec: object) -> Any:
    """A Zarr v2 array's codec with its compressor bounded (``BoundedCompressor``), when it has
    no filters (with filters the compressed stream's decoded size is not the chunk's)."""
    from zarr.codecs._v2 import V2Codec

    from zopt.codecs.bounded import BoundedCompressor

    if isinstance(codec, V2Codec) and codec.compressor is not None and not codec.filters \
            and not isinstance(codec.compressor, BoundedCompressor):
        return replace(codec, compressor=BoundedCompressor(codec.compressor))
    return codec


register_pipeline(ChunkIndexCodecPipeline)
