"""Synchronous encoding of one chunk through a Zarr v3 codec list, and its size bound.

zarr-python encodes chunks through an asyncio pipeline built for reading and writing whole
arrays. zopt's shard writers (``zopt.store.shards``) encode inner chunks themselves — one chunk at a
time inside a Dask task, with the chunk's grid coordinates known — and need two things zarr's
pipeline does not offer: the ``conditional`` codec's mask per chunk, and a bound on the encoded
size of a chunk so that it can own a fixed slot in a shard file.

``ChunkEncoder`` runs a codec list (array→array codecs, one array→bytes codec, bytes→bytes
codecs; the inner chain of a ``sharding_indexed`` codec) on a numpy chunk, both ways
(``encode``; ``decode`` and ``decode_bytes``, which the shard index reader and ``zopt info``
use to undo a chain's trailing codecs, e.g. ``crc32c``):

- array→array and array→bytes codecs through their synchronous ``_encode_sync`` (zarr's
  ``bytes``/``transpose`` and zopt's codecs have one), otherwise their async method on a
  private event loop; except two array→bytes steps done without zarr's buffer objects (~20 µs
  of GIL per chunk, issue 34): little-endian ``bytes`` of plain numpy numbers (the chunk's own
  bytes) and numcodecs' ``pcodec`` (``simple_compress`` with the configuration made once);
- bytes→bytes codecs through ``zopt.codecs.sync`` (numcodecs, or ``zopt.compat.libzstd`` for
  zstd and numpy for the byte shuffle, all releasing the GIL);
- ``conditional`` through its decision with the chunk's ``chunk_index``.

``max_encoded_size`` is the per-chunk upper bound (bytes) used to size fixed slots:

============================  ======================================================
codec                         bound for ``n`` input bytes
============================  ======================================================
``bytes``, ``transpose``,     exact (``compute_encoded_size``)
``shuffle``, ``crc32c``
``conditional``               ``n + header_bits/8`` — the writer stores mask 0 when an
                              encoding would be larger (``ChunkEncoder.encode(..., limit=)``)
``zstd``                      ``ZSTD_COMPRESSBOUND(n)`` (+4 with checksum)
``blosc``                     ``n + 16`` (``BLOSC_MAX_OVERHEAD``)
``gzip``                      zlib's ``compressBound(n)`` + 18 bytes of gzip wrapper
``numcodecs.pcodec``          ``n + n/256 + 1024`` (array→bytes; pcodec stores
                              incompressible numbers verbatim plus small headers)
============================  ======================================================

Any other codec has no known bound: ``max_encoded_size`` raises ValueError naming it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import NDBuffer, default_buffer_prototype

from zopt.codecs.bytes import as_zopt_bytes
from zopt.codecs.conditional import ConditionalCodec, format_header
from zopt.codecs.sync import numcodec_of, sync_decoder, sync_encoder
from zopt.compat.zarr_compat import nd_buffer
from zopt.errors import ChunkDecodeError, OptionError

if TYPE_CHECKING:
    from zarr.abc.codec import Codec
    from zarr.core.buffer import Buffer
    from zarr.core.dtype.wrapper import ZDType

    from zopt.codecs.decisions import DecisionLike
    from zopt.codecs.sync import Transform

__all__ = ["ChunkEncoder", "EncodedChunk", "chunk_spec", "max_encoded_size"]

#: ``f(data, chunk_index) -> (mask, payload)`` of a ``conditional`` codec (``ConditionalCodec.chunk_encoder``)
Chooser = Callable[[np.ndarray, "tuple[int, ...] | None"], "tuple[int, np.ndarray]"]


def _not_conditional(data: np.ndarray, chunk_index: tuple[int, ...] | None) -> tuple[int, np.ndarray]:
    raise AssertionError("a bytes→bytes codec that is not conditional has no chooser")


def chunk_spec(shape: Sequence[int], dtype: ZDType[Any, Any], fill_value: object) -> ArraySpec:
    """A zarr ``ArraySpec`` for one chunk: ``shape`` in elements, a zarr ``ZDType``, fill value."""
    return ArraySpec(
        shape=tuple(int(s) for s in shape),
        dtype=dtype,
        fill_value=fill_value,
        config=ArrayConfig(order="C", write_empty_chunks=False),
        prototype=default_buffer_prototype(),
    )


def _zstd_bound(n: int) -> int:
    # ZSTD_COMPRESSBOUND from zstd.h
    return n + (n >> 8) + (((128 << 10) - n) >> 11 if n < (128 << 10) else 0)


def _pcodec_bound(n: int) -> int:
    # pcodec falls back to storing numbers verbatim: measured overhead 18-47 bytes (up to 300k
    # numbers, any width); a page (<= 262144 numbers) adds tens of bytes, hence n/256 + 1 KiB
    return n + (n >> 8) + 1024


def _bytes_bound(codec: Codec, n: int, spec: ArraySpec) -> int:
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

    if isinstance(codec, ConditionalCodec):
        return codec.max_encoded_size(n)
    if isinstance(codec, ZstdCodec):
        return _zstd_bound(n) + (4 if codec.checksum else 0)
    if isinstance(codec, BloscCodec):
        return n + 16
    if isinstance(codec, GzipCodec):
        return n + (n >> 12) + (n >> 14) + (n >> 25) + 13 + 18
    try:
        return int(codec.compute_encoded_size(n, spec))
    except NotImplementedError:
        pass
    name = codec.to_dict().get("name", type(codec).__name__)
    raise OptionError("codecs",
        f"{name!r} has no known upper bound on its encoded size, so fixed slots cannot be "
        "sized; wrap it in 'conditional' (bounded by the raw size + header), use zstd, blosc, "
        "gzip or crc32c, or write the compact layout"
    )


@dataclass(frozen=True)
class EncodedChunk:
    """One encoded chunk: ``data`` (1-D uint8) and the mask of each ``conditional`` codec."""

    data: np.ndarray
    masks: tuple[int, ...]

    @property
    def mask(self) -> int | None:
        """The first conditional codec's mask, or None when the chain has none."""
        return self.masks[0] if self.masks else None


class ChunkEncoder:
    """Encode chunks of one array through a codec list, synchronously (see module docstring).

    codecs : the codec objects, in chain order (e.g. ``ShardingCodec.codecs``).
    spec : the chunk's ``ArraySpec`` (``chunk_spec``); every chunk encoded has its shape.
    Raises ValueError when the list does not have exactly one array→bytes codec.
    """

    def __init__(self, codecs: Sequence[Codec], spec: ArraySpec) -> None:
        from zopt.compat.alloc import retain_freed_memory

        retain_freed_memory()  # chunk-sized buffers reused instead of faulted in per chunk
        self.spec = spec
        self.array_array: list[tuple[ArrayArrayCodec, ArraySpec]] = []
        array_bytes: tuple[ArrayBytesCodec, ArraySpec] | None = None
        self.bytes_bytes: list[tuple[BytesBytesCodec, ArraySpec]] = []
        current = spec
        for codec in codecs:
            codec = as_zopt_bytes(codec.evolve_from_array_spec(current))
            if isinstance(codec, ArrayArrayCodec):
                if array_bytes is not None:
                    raise OptionError("codecs", "an array→array codec follows the array→bytes codec")
                self.array_array.append((codec, current))
                current = codec.resolve_metadata(current)
            elif isinstance(codec, ArrayBytesCodec):
                if array_bytes is not None:
                    raise OptionError("codecs", "more than one array→bytes codec")
                array_bytes = (codec, current)
            elif isinstance(codec, BytesBytesCodec):
                if array_bytes is None:
                    raise OptionError("codecs", "a bytes→bytes codec precedes the array→bytes codec")
                self.bytes_bytes.append((codec, current))
            else:
                raise OptionError("codecs", f"{codec!r} is not a zarr codec")
        if array_bytes is None:
            raise OptionError("codecs", "the chain needs an array→bytes codec such as 'bytes'")
        self.array_bytes: tuple[ArrayBytesCodec, ArraySpec] = array_bytes
        self._encoders: list[Transform | None] = [
            None if isinstance(c, ConditionalCodec) else sync_encoder(c, s) for c, s in self.bytes_bytes
        ]
        self._decoders: list[Transform] | None = None  # made on the first decode: most encoders never decode
        self._native, self._direct, self._direct_kind = _direct_array_bytes(self.array_array, self.array_bytes[0], spec)
        self._conditional_encoders()

    def _conditional_encoders(self) -> None:
        # per bytes→bytes codec: (chooser, header bytes, header bits) of a conditional codec; the
        # others' entries are never used (their encoder in ``_encoders`` is not None)
        self._choosers: list[tuple[Chooser, int, int]] = [
            (c.chunk_encoder(s), c.header_nbytes, c.header_bits) if isinstance(c, ConditionalCodec)
            else (_not_conditional, 0, 0) for c, s in self.bytes_bytes
        ]

    @property
    def codecs(self) -> tuple[Codec, ...]:
        return (*[c for c, _ in self.array_array], self.array_bytes[0], *[c for c, _ in self.bytes_bytes])

    def with_decision(self, decision: DecisionLike) -> ChunkEncoder:
        """A copy whose ``conditional`` codecs decide with ``decision`` (see ``zopt.codecs.decisions``)."""
        out = ChunkEncoder.__new__(ChunkEncoder)
        out.__dict__.update(self.__dict__)
        out.bytes_bytes = [
            (c.with_decision(decision) if isinstance(c, ConditionalCodec) else c, s)
            for c, s in self.bytes_bytes
        ]
        out._conditional_encoders()
        return out

    def max_encoded_size(self) -> int:
        """Upper bound (bytes) of one encoded chunk; ValueError naming a codec without one."""
        codec, s = self.array_bytes
        try:
            n = int(codec.compute_encoded_size(_raw_nbytes(s), s))
        except NotImplementedError:
            if _codec_name(codec) != "numcodecs.pcodec":  # pcodec's bound is known (_pcodec_bound)
                raise OptionError("codecs", f"{_codec_name(codec)!r} has no known upper bound on its encoded size, so "
                                 "fixed slots cannot be sized; use 'bytes' with zstd, blosc or 'conditional', or write "
                                 "the compact layout") from None
            n = _pcodec_bound(_raw_nbytes(s))
        for bb, s in self.bytes_bytes:
            n = _bytes_bound(bb, n, s)
        return n

    def _to_bytes(self, chunk: np.ndarray) -> np.ndarray:
        if self._direct is not None and chunk.dtype == self._native:
            return self._direct(chunk)
        if not (chunk.flags.c_contiguous and chunk.flags.aligned):
            # a view of a region, or an array unpickled from a network frame (a chunk sent between
            # dask.distributed workers): numcodecs' array→bytes codecs (pcodec) need C order and alignment
            chunk = np.require(chunk, requirements=("C", "A"))
        value = nd_buffer(self.spec, chunk)
        for aa, s in self.array_array:
            value = _run_sync(aa, "_encode_sync", "_encode_single", value, s)
        ab, s = self.array_bytes
        out = _run_sync(ab, "_encode_sync", "_encode_single", value, s)
        return np.asarray(out.as_numpy_array()).view(np.uint8).ravel()

    def encode(
        self,
        chunk: np.ndarray,
        chunk_index: tuple[int, ...] | None = None,
        *,
        limit: int | None = None,
    ) -> EncodedChunk:
        """Encode one chunk (numpy array of the spec's shape and dtype).

        chunk_index : grid coordinates handed to ``conditional`` decisions.
        limit : maximum encoded size in bytes (a fixed slot). When the decided masks would
            exceed it, the chunk is re-encoded with every ``conditional`` mask 0; if that still
            exceeds ``limit`` (a codec's bound is wrong), ValueError.
        """
        raw = self._to_bytes(chunk)
        data, masks = self._bytes_bytes(raw, chunk_index, force_zero=False)
        if limit is not None and data.size > limit:
            if masks:
                data, masks = self._bytes_bytes(raw, chunk_index, force_zero=True)
            if data.size > limit:
                raise ValueError(
                    f"chunk {chunk_index}: encoded to {data.size} bytes, more than its slot of {limit}"
                )
        return EncodedChunk(data, masks)

    @property
    def native_dtype(self) -> np.dtype:
        """The numpy type of the chunks this encoder takes (the spec's data type)."""
        return np.dtype(self.spec.dtype.to_native_dtype())

    @property
    def direct_kind(self) -> str | None:
        """``"bytes"`` or ``"pcodec"`` when the array→bytes step runs without zarr's buffer objects
        (see ``_direct_array_bytes``), else None."""
        return self._direct_kind

    @property
    def direct(self) -> Transform | None:
        """``f(chunk) -> 1-D uint8``: the array→bytes step alone on a chunk of ``native_dtype``
        when ``direct_kind`` is not None, else None."""
        return self._direct

    @property
    def array_bytes_codec(self) -> ArrayBytesCodec:
        """The array→bytes codec (e.g. ``bytes``, ``packbits``)."""
        return self.array_bytes[0]

    @property
    def bytes_bytes_codecs(self) -> tuple[BytesBytesCodec, ...]:
        """The bytes→bytes codecs, in chain order."""
        return tuple(c for c, _ in self.bytes_bytes)

    def decode_bytes(
        self,
        data: bytes | np.ndarray,
        *,
        stop: int = 0,
        key: str | None = None,
        inner: tuple[int, ...] | None = None,
    ) -> np.ndarray:
        """Undo the bytes→bytes codecs from the last down to position ``stop`` (0: all of them).

        data : stored bytes of one chunk. Returns 1-D uint8: the bytes codec ``stop`` produced
        (``stop`` = the index of a ``conditional`` codec in ``bytes_bytes_codecs`` + 1 gives its
        header and payload). Raises ``ChunkDecodeError`` naming ``key``, ``inner`` and the codec
        whose decoding failed (a checksum mismatch, truncated bytes).
        """
        if self._decoders is None:
            self._decoders = [sync_decoder(c, s) for c, s in self.bytes_bytes]
        raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes | bytearray | memoryview) else data
        for i in range(len(self.bytes_bytes) - 1, stop - 1, -1):
            try:
                raw = self._decoders[i](raw)
            except Exception as exc:  # noqa: BLE001 - zarr's and numcodecs' codecs raise many types
                raise ChunkDecodeError(key, inner, exc, codec=_codec_name(self.bytes_bytes[i][0])) from exc
        return raw

    def decode(self, data: bytes | np.ndarray, *, key: str | None = None,
               inner: tuple[int, ...] | None = None) -> np.ndarray:
        """Decode one stored chunk into a numpy array of the spec's shape and dtype.

        Raises ``ChunkDecodeError`` naming ``key``, ``inner`` and the failing codec.
        """
        raw = self.decode_bytes(data, key=key, inner=inner)
        proto = self.spec.prototype
        codec: Codec
        codec, s = self.array_bytes
        try:
            value = _run_sync(codec, "_decode_sync", "_decode_single", proto.buffer.from_array_like(raw), s)
            for codec, s in reversed(self.array_array):
                value = _run_sync(codec, "_decode_sync", "_decode_single", value, s)
        except Exception as exc:  # noqa: BLE001 - as above
            raise ChunkDecodeError(key, inner, exc, codec=_codec_name(codec)) from exc
        out = np.asarray(value.as_numpy_array())
        native = self.spec.dtype.to_native_dtype()
        return out if out.dtype == native else out.astype(native)  # e.g. a big-endian ``bytes`` codec

    def _bytes_bytes(
        self, data: np.ndarray, chunk_index: tuple[int, ...] | None, force_zero: bool
    ) -> tuple[np.ndarray, tuple[int, ...]]:
        masks = []
        for enc, (choose, head, bits) in zip(self._encoders, self._choosers, strict=True):
            if enc is not None:
                data = enc(data)
                continue
            mask, payload = (0, data) if force_zero else choose(data, chunk_index)
            out = np.empty(head + payload.size, dtype=np.uint8)
            if head == 1:
                out[0] = mask
            else:
                out[:head] = np.frombuffer(format_header(mask, bits), np.uint8)
            out[head:] = payload
            data = out
            masks.append(mask)
        return data, tuple(masks)


def _direct_array_bytes(array_array: Sequence[object], array_bytes: ArrayBytesCodec, spec: ArraySpec,
                        ) -> tuple[np.dtype | None, Transform | None, str | None]:
    """``(native dtype, f(chunk) -> 1-D uint8, kind)`` for chains whose array→bytes step needs none
    of zarr's buffer objects (issue 34: they cost ~20 µs of GIL per chunk), else ``(None, None, None)``.

    - ``bytes`` little-endian (or 1-byte) on a little-endian machine, no array→array codec, a
      plain numpy number type: the chunk's own bytes in C order (a view when it is C-contiguous),
      what zarr's ``BytesCodec`` returns;
    - numcodecs' ``PCodec`` (``numcodecs.pcodec``): ``pcodec.standalone.simple_compress`` on the
      flattened chunk with the codec's configuration made once, what ``PCodec.encode`` does.
    """
    from zarr.codecs import BytesCodec as ZarrBytesCodec

    from zopt.compat.zarr_compat import endian_text
    from zopt.dtypes.complex import MLComplex
    from zopt.dtypes.ml import MLDType

    if array_array or isinstance(spec.dtype, MLDType | MLComplex):
        return None, None, None
    try:
        native = np.dtype(spec.dtype.to_native_dtype())
    except Exception:  # noqa: BLE001 - a data type without a numpy equivalent
        return None, None, None
    if native.kind not in "biufc" or native.byteorder not in "=<|" or sys.byteorder != "little":
        return None, None, None
    if isinstance(array_bytes, ZarrBytesCodec):
        if native.itemsize > 1 and endian_text(array_bytes.endian) not in (None, "little"):
            return None, None, None

        def raw(chunk: np.ndarray) -> np.ndarray:
            return (chunk if chunk.flags.c_contiguous else np.ascontiguousarray(chunk)).reshape(-1).view(np.uint8)

        return native, raw, "bytes"
    nc = numcodec_of(array_bytes)
    if nc is not None and type(nc).__name__ == "PCodec" and type(nc).__module__ == "numcodecs.pcodec":
        from pcodec import standalone

        config = nc._get_chunk_config()  # what PCodec.encode builds on every call
        compress = standalone.simple_compress

        def pco(chunk: np.ndarray) -> np.ndarray:
            flat = (chunk if chunk.flags.c_contiguous and chunk.flags.aligned else np.require(chunk, requirements=("C", "A"))).reshape(-1)
            return np.frombuffer(compress(flat, config), dtype=np.uint8)

        return native, pco, "pcodec"
    return None, None, None


def _codec_name(codec: Codec) -> str:
    try:
        return str(codec.to_dict()["name"])
    except Exception:  # noqa: BLE001 - a codec without to_dict
        return type(codec).__name__


def _raw_nbytes(spec: ArraySpec) -> int:
    n = int(np.prod(spec.shape, dtype=np.int64))
    size = getattr(spec.dtype, "item_size", None)  # zarr's fixed-size types and zopt's have it
    return n * (size if size is not None else spec.dtype.to_native_dtype().itemsize)


def _run_sync(codec: Codec, sync_name: str, async_name: str, value: Buffer | NDBuffer, spec: ArraySpec) -> Any:
    fn = getattr(codec, sync_name, None)
    if fn is not None:
        return fn(value, spec)
    nc = numcodec_of(codec) if isinstance(codec, ArrayBytesCodec) else None
    if nc is not None:
        # zarr < 3.4's numcodecs.* array→bytes wrappers (pcodec, zfpy) have only async methods,
        # which start an event loop and a thread per chunk; this is what zarr 3.4's sync ones do
        if isinstance(value, NDBuffer):  # encoding
            return spec.prototype.buffer.from_bytes(nc.encode(np.ascontiguousarray(value.as_ndarray_like())))
        return spec.prototype.nd_buffer.from_ndarray_like(nc.decode(value.to_bytes()).reshape(spec.shape))
    return asyncio.run(getattr(codec, async_name)(value, spec))


def max_encoded_size(codecs: Sequence[Codec], spec: ArraySpec) -> int:
    """Upper bound (bytes) of one chunk of ``spec`` encoded with ``codecs``.

    Raises ValueError naming the first codec without a known bound (see module docstring).
    """
    return ChunkEncoder(codecs, spec).max_encoded_size()

