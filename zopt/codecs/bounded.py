"""Decoding hostile bytes with bounded memory, and decode errors that name codec and chunk.

A zstd frame header may claim any content size (RFC 8878 §3.1.1.1.4, ``Frame_Content_Size``):
numcodecs' ``Zstd.decode`` allocates what the header claims, so a chunk of a few bytes can ask
for gigabytes. ``zstd_decode_bounded`` reads the claim first and refuses one above the most the
chunk can hold (computed from the chunk's shape and data type by the caller), then decodes into
a buffer of exactly the claimed size (``Zstd.decode(buf, out=...)``; numcodecs raises
``ValueError`` when the frame needs more).

Every other decompression of stored data is bounded the same way (``decode_bounded``): the
decoded size the array's metadata implies (chunk shape × item size, then each bytes→bytes
codec's largest output, ``bytes_bound``) limits what a frame may produce. Formats that state
their size are refused on the claim, before allocating (zstd ``Frame_Content_Size``, blosc's
``nbytes`` header field, numcodecs LZ4's size prefix); streaming formats (gzip, zlib, bz2, lzma)
are decoded with ``max_length`` and refused once they pass the limit. ``zopt.codecs.pipeline`` applies
it to every bytes→bytes codec of a Zarr v3 chunk, and to the compressor of a Zarr v2 array
without filters (``BoundedCompressor``; with filters the compressed stream's size is not known
from the metadata, so it is not bounded).

``decode_error`` turns any exception of a codec's decoding into ``ChunkDecodeError`` (a
``ZoptError`` and a ``ValueError``) naming the codec and the chunk being decoded (from
``zopt.codecs.context.current_chunk``, when zopt's pipeline or a zopt reader set it).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, Self

import numpy as np

from zopt.errors import ChunkDecodeError

if TYPE_CHECKING:
    from numcodecs.abc import Codec as NumcodecsCodec
    from typing_extensions import Buffer as BufferLike
    from zarr.abc.codec import BytesBytesCodec
    from zarr.abc.numcodec import Numcodec
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

    from zopt.compat.zarr_compat import SyncCodec

__all__ = ["BoundedCompressor", "bytes_bound", "decode_bounded", "decode_error", "decode_within", "decoded_limit",
           "raw_nbytes",
           "zstd_content_size", "zstd_decode_bounded"]

_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50  # RFC 8878 §3.1.2: magic numbers 0x184D2A50 to 0x184D2A5F


def zstd_content_size(data: np.ndarray) -> int | None:
    """The ``Frame_Content_Size`` a zstd frame's header declares, or None when it declares none.

    data : 1-D uint8, the frame. Raises ValueError when the bytes do not start with a zstd frame
    header (RFC 8878 §3.1.1).
    """
    if data.size < 5 or int.from_bytes(data[:4].tobytes(), "little") != _MAGIC:
        raise ValueError("not a zstd frame (bad magic number or too short)")
    fhd = int(data[4])
    fcs_flag, single, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
    size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if size == 0:
        return None
    if data.size < pos + size:
        raise ValueError("zstd frame header is truncated")
    value = int.from_bytes(data[pos : pos + size].tobytes(), "little")
    return value + 256 if size == 2 else value


def zstd_decode_bounded(data: np.ndarray, limit: int) -> np.ndarray:
    """Decode the zstd frame ``data`` (1-D uint8) into at most ``limit`` bytes (numcodecs'
    ``Zstd``). Raises ValueError when the frame claims, or yields, more than ``limit``."""
    import numcodecs

    from zopt.compat import libzstd

    nc = numcodecs.Zstd()
    skippable = data.size >= 4 and int.from_bytes(data[:4].tobytes(), "little") & 0xFFFFFFF0 == _SKIPPABLE
    claimed = None if skippable else zstd_content_size(data)
    if claimed is not None and claimed > limit:
        raise ValueError(f"zstd frame claims {claimed} bytes of content, more than the {limit} this chunk can hold")
    if libzstd.available():  # several frames, skippable frames: as zarr-python (numcodecs) reads them
        out = np.empty(limit, dtype=np.uint8)
        try:
            got = libzstd.decompress_into(np.ascontiguousarray(data), out)
        except RuntimeError as exc:
            if "too small" in str(exc):
                raise ValueError(f"zstd frames hold more than the {limit} bytes this chunk can hold") from exc
            raise ValueError(str(exc)) from exc
        return out[:got]
    if claimed is not None:
        if claimed > limit:
            raise ValueError(f"zstd frame claims {claimed} bytes of content, more than the {limit} this chunk can hold")
        out = np.empty(claimed, dtype=np.uint8)
        nc.decode(np.ascontiguousarray(data), out=out)
        return out
    out = np.frombuffer(nc.decode(np.ascontiguousarray(data)), dtype=np.uint8)
    if out.size > limit:
        raise ValueError(f"zstd frame holds {out.size} bytes of content, more than the {limit} this chunk can hold")
    return out


def raw_nbytes(spec: ArraySpec) -> int:
    """Bytes of one decoded chunk of ``spec`` (a zarr ``ArraySpec``): shape × item size."""
    n = int(np.prod(spec.shape, dtype=np.int64))
    dtype = spec.dtype
    size = getattr(dtype, "item_size", None)
    return n * (size if size is not None else dtype.to_native_dtype().itemsize)


def bytes_bound(codec: BytesBytesCodec, n: int, spec: ArraySpec) -> int | None:
    """Most bytes a bytes→bytes ``codec`` makes of ``n`` bytes, or None when unknown."""
    name = type(codec).__name__
    if name == "ZstdCodec":
        bound = n + (n >> 8) + (((128 << 10) - n) >> 11 if n < (128 << 10) else 0)  # ZSTD_COMPRESSBOUND
        return bound + (4 if getattr(codec, "checksum", False) else 0)
    if name == "BloscCodec":
        return n + 16
    if name == "GzipCodec":
        return n + (n >> 12) + (n >> 14) + (n >> 25) + 13 + 18
    try:
        return int(codec.compute_encoded_size(n, spec))
    except (NotImplementedError, AttributeError, TypeError, ValueError):
        return None


def decode_error(codec: str, exc: BaseException) -> ChunkDecodeError:
    """``ChunkDecodeError`` for a failure of ``codec`` (its name) decoding the current chunk."""
    if isinstance(exc, ChunkDecodeError):
        return exc
    from zopt.codecs.context import current_chunk

    ctx = current_chunk()
    return ChunkDecodeError(None if ctx is None else ctx.key, None if ctx is None else ctx.coords_in_shard, exc, codec=codec)


#: the decoded bytes of the chunk being read (set by zopt's pipeline), for ``BoundedCompressor``
decoded_limit: contextvars.ContextVar[int | None] = contextvars.ContextVar("zopt_decoded_limit", default=None)


def _too_much(what: str, n: int, limit: int) -> ValueError:
    return ValueError(f"{what} {n} bytes of content, more than the {limit} this chunk can hold")


class _Decompressor(Protocol):
    """What ``_stream`` uses of zlib's, bz2's and lzma's decompressor objects."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


def _stream(make: Callable[[], _Decompressor], data: bytes, limit: int, name: str, members: bool = False) -> np.ndarray:
    """Decode with a streaming decompressor (``make()``), at most ``limit`` bytes; ``members``:
    concatenated streams (gzip members) are decoded one after another."""
    out = []
    total = 0
    while True:
        d = make()
        piece = d.decompress(data, limit - total + 1)
        total += len(piece)
        out.append(piece)
        tail: bytes = getattr(d, "unconsumed_tail", b"")  # zlib's; bz2 and lzma have none
        if total > limit or tail:
            raise ValueError(f"{name} stream holds more than the {limit} bytes this chunk can hold")
        if not d.eof:
            raise ValueError(f"{name} stream is truncated")
        data = d.unused_data
        if not (members and data):
            break
    return np.frombuffer(b"".join(out), dtype=np.uint8)


def decode_bounded(nc: NumcodecsCodec, data: np.ndarray, limit: int) -> np.ndarray | None:
    """Decode ``data`` (1-D uint8) with the numcodecs codec ``nc`` into at most ``limit`` bytes.
    Returns None when ``nc`` is not a format bounded here (the caller decodes it as usual and
    checks the size afterwards). Raises ValueError on a claim or an output above ``limit``."""
    import bz2
    import lzma
    import zlib

    import numcodecs

    data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    name = type(nc).__name__
    if name == "Zstd":
        return zstd_decode_bounded(data, limit)
    if name in ("Blosc", "LZ4"):
        head = 4 if name == "Blosc" else 0
        if data.size < head + 4:
            raise ValueError(f"{name.lower()} header is truncated")
        claimed = int.from_bytes(data[head : head + 4].tobytes(), "little")
        if claimed > limit:
            raise _too_much(f"{name.lower()} header claims", claimed, limit)
        return np.frombuffer(nc.decode(data), dtype=np.uint8) if name == "LZ4" else _u8(nc.decode(data))
    raw = data.tobytes()
    if name == "GZip":
        return _stream(lambda: zlib.decompressobj(31), raw, limit, "gzip", members=True)
    if name == "Zlib":
        return _stream(lambda: zlib.decompressobj(15), raw, limit, "zlib")
    if name == "BZ2":
        return _stream(bz2.BZ2Decompressor, raw, limit, "bz2", members=True)
    if isinstance(nc, numcodecs.LZMA):
        filters = nc.filters if nc.format == lzma.FORMAT_RAW else None
        return _stream(lambda: lzma.LZMADecompressor(format=nc.format, filters=filters), raw, limit, "lzma")
    return None


def _u8(out: object) -> np.ndarray:
    return np.asarray(out).view(np.uint8).reshape(-1) if not isinstance(out, bytes | bytearray) else \
        np.frombuffer(out, dtype=np.uint8)


def decode_within(codec: SyncCodec[Buffer, Buffer], nc: NumcodecsCodec | None, data: Buffer, spec: ArraySpec,
                  limit: int | None) -> Buffer:
    """``codec._decode_sync(data, spec)`` (a zarr bytes→bytes codec, ``data`` a zarr Buffer;
    ``nc`` the numcodecs object behind it or None, ``zopt.codecs.sync.numcodec_of``), yielding at
    most ``limit`` bytes: a frame claiming more is refused before it is allocated
    (``decode_bounded``), one yielding more once decoded; ``ChunkDecodeError`` names the chunk."""
    if limit is None:
        return codec._decode_sync(data, spec)
    name = getattr(nc, "codec_id", None) or type(codec).__name__
    try:
        got = None if nc is None else decode_bounded(nc, data.as_numpy_array(), limit)
        if got is None:
            out = codec._decode_sync(data, spec)
            if len(out) > limit:
                raise _too_much("it decodes to", len(out), limit)
            return out
    except ValueError as exc:
        raise decode_error(name, exc) from None
    return spec.prototype.buffer.from_array_like(got)


class BoundedCompressor:
    """A Zarr v2 array's numcodecs compressor whose ``decode`` is bounded by ``decoded_limit``
    (the chunk's bytes, set by zopt's pipeline for arrays without filters). Everything else is
    the wrapped codec's."""

    def __init__(self, codec: Numcodec) -> None:
        self._codec = codec
        self.codec_id = codec.codec_id

    def get_config(self) -> Any:
        return self._codec.get_config()

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Self:
        """The codec of numcodecs' ``config`` (``numcodecs.get_codec``), bounded."""
        import numcodecs

        return cls(numcodecs.get_codec(config))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._codec, name)

    def __eq__(self, other: object) -> bool:
        return self._codec == (other._codec if isinstance(other, BoundedCompressor) else other)

    def __hash__(self) -> int:
        return hash(self._codec)

    def __repr__(self) -> str:
        return repr(self._codec)

    def encode(self, buf: object) -> Any:
        return self._codec.encode(buf)

    def decode(self, buf: BufferLike | np.ndarray, out: object = None) -> Any:
        limit = decoded_limit.get()
        if limit is None or out is not None:
            return self._codec.decode(buf, out=out)
        data = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
        try:
            got = decode_bounded(self._codec, data, limit)
        except ValueError as exc:
            raise decode_error(self._codec.codec_id, exc) from None
        if got is None:
            got = _u8(self._codec.decode(buf))
            if got.size > limit:
                raise decode_error(self._codec.codec_id, _too_much("it decodes to", got.size, limit))
        return got
