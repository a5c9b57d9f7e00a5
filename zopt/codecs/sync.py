"""Synchronous encode/decode for the bytes→bytes codecs the ``conditional`` codec wraps.

zarr-python's codec API is asynchronous and its built-in compressors hop to a thread per call.
The ``conditional`` codec runs a chunk's whole decision (several trial encodings) in one worker
thread instead, so it needs plain functions: the numcodecs object behind zarr's zstd, gzip and
blosc codecs and behind zarr's ``numcodecs.*`` wrappers (numcodecs releases the GIL while
compressing), zopt's own ``shuffle``, zarr's synchronous ``_encode_sync``/``_decode_sync``
where a codec has them (crc32c), and, for any other codec, its async method run on a private
event loop in the calling thread. zstd goes through ``zopt.compat.libzstd`` (numcodecs' library,
a context per thread: numcodecs makes one per call while holding the GIL) and the byte shuffle,
zopt's or numcodecs', through numpy (numcodecs' Cython loop holds the GIL): the same bytes.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numcodecs
import numpy as np

if TYPE_CHECKING:
    from numcodecs.abc import Codec as NumcodecsCodec
    from zarr.abc.codec import Codec
    from zarr.core.array_spec import ArraySpec

    from zopt.codecs.shuffle import ShuffleCodec

__all__ = ["numcodec_of", "sync_decoder", "sync_encoder", "sync_row_transform", "zstd_row_sizes"]

Transform = Callable[[np.ndarray], np.ndarray]


def _as_u8(out: object) -> np.ndarray:
    return np.frombuffer(out, dtype=np.uint8) if isinstance(out, bytes | bytearray | memoryview) else np.asarray(out).view(np.uint8).ravel()


def numcodec_of(codec: object) -> Any | None:
    """The numcodecs object behind a zarr codec (zstd, gzip, blosc, ``numcodecs.*`` wrappers;
    zopt's shuffle as an adapter), or None."""
    return _numcodec(codec)


def _numcodec(codec: object) -> Any | None:
    try:
        return _numcodec_cached(codec)
    except TypeError:  # unhashable codec objects (zarr's numcodecs.* wrappers hold a dict)
        return _numcodec_uncached(codec)


@functools.lru_cache(maxsize=256)
def _numcodec_cached(codec: object) -> Any | None:
    return _numcodec_uncached(codec)


def _numcodec_uncached(codec: object) -> Any | None:
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

    from zopt.codecs.shuffle import ShuffleCodec

    if isinstance(codec, ShuffleCodec):
        return _ShuffleAdapter(codec)
    if isinstance(codec, ZstdCodec):
        return numcodecs.Zstd(level=codec.level, checksum=codec.checksum)
    if isinstance(codec, GzipCodec):
        return numcodecs.GZip(level=codec.level)
    if isinstance(codec, BloscCodec) and getattr(codec, "typesize", None) is not None:
        return codec._blosc_codec
    inner = getattr(codec, "_codec", None)  # zarr.codecs.numcodecs.* wrappers
    if inner is not None and hasattr(inner, "encode") and hasattr(inner, "decode"):
        return inner
    return None


class _ShuffleAdapter:
    """numcodecs-style ``encode``/``decode`` for zopt's numpy shuffle."""

    def __init__(self, codec: ShuffleCodec) -> None:
        self.codec = codec

    def encode(self, data: np.ndarray) -> np.ndarray:
        return self.codec.encode_bytes(data)

    def decode(self, data: np.ndarray) -> np.ndarray:
        return self.codec.decode_bytes(data)


def _via_zarr_method(codec: Codec, spec: ArraySpec, sync_name: str, async_name: str) -> Transform:
    # zarr's synchronous method where the codec has one (crc32c, gzip, blosc), else its async
    # method on a private event loop in the calling thread
    sync_fn = getattr(codec, sync_name, None)

    def run(data: np.ndarray) -> np.ndarray:
        buf = spec.prototype.buffer.from_array_like(np.ascontiguousarray(data))
        out = sync_fn(buf, spec) if sync_fn is not None else asyncio.run(getattr(codec, async_name)(buf, spec))
        return np.asarray(out.as_numpy_array()).view(np.uint8).ravel()

    return run


def _contiguous_u8(data: np.ndarray) -> np.ndarray:
    return data if data.flags.c_contiguous and data.dtype == np.uint8 and data.ndim == 1 else np.ascontiguousarray(data).view(np.uint8).ravel()


def shuffle_encoder(size: int, fallback: Transform | None = None) -> Transform:
    """``f(bytes_u8) -> bytes_u8``: the byte shuffle of ``size``-byte elements as one numpy
    transposed copy (which releases the GIL), with the least Python per call; the bytes of
    ``zopt.codecs.shuffle.ShuffleCodec`` and of ``numcodecs.Shuffle``. Inputs whose length is
    not a whole number of elements go to ``fallback`` (numcodecs refuses them; zopt's shuffle
    leaves the trailing bytes in place)."""
    from zopt.codecs.shuffle import shuffle_rows

    def encode(data: np.ndarray) -> np.ndarray:
        data = _contiguous_u8(data)
        n = data.size
        if size <= 1:
            return data.copy()
        if n % size:
            return fallback(data) if fallback is not None else shuffle_rows(data.reshape(1, -1), size, False).reshape(-1)
        out = np.empty(n, dtype=np.uint8)
        out.reshape(size, n // size)[...] = data.reshape(n // size, size).T
        return out

    return encode


def _fast_encoder(codec: Codec, nc: NumcodecsCodec) -> Transform | None:
    """An encoder that holds the GIL for a few microseconds a call (issue 34), for the codecs
    that have one: zstd (``zopt.compat.libzstd``: the bytes numcodecs writes, without its
    per-call context) and the byte shuffle (zopt's and numcodecs', whose Cython loop holds the
    GIL); None for the others."""
    from zopt.codecs.shuffle import ShuffleCodec
    from zopt.compat import libzstd

    if isinstance(codec, ShuffleCodec):
        return shuffle_encoder(codec.element_size or 1)
    if type(nc) is numcodecs.Shuffle:
        return shuffle_encoder(int(nc.elementsize), lambda data: _as_u8(nc.encode(data)))
    if type(nc) is numcodecs.Zstd and libzstd.available():
        level, checksum = int(nc.level), bool(getattr(nc, "checksum", False))
        return lambda data: libzstd.compress(_contiguous_u8(data), level, checksum)
    return None


def _needed(codec: Codec, spec: ArraySpec | None) -> ArraySpec:
    """``spec``, which a zarr codec without a numcodecs twin needs (numcodecs ones run without)."""
    if spec is None:
        raise ValueError(f"spec: {type(codec).__name__} encodes through zarr, which needs the chunk's ArraySpec")
    return spec


def sync_encoder(codec: Codec, spec: ArraySpec | None) -> Transform:
    """``f(bytes_u8) -> bytes_u8`` encoding with ``codec`` (1-D uint8 in and out)."""
    nc = _numcodec(codec)
    if nc is None:
        return _via_zarr_method(codec, _needed(codec, spec), "_encode_sync", "_encode_single")
    fast = _fast_encoder(codec, nc)
    if fast is not None:
        return fast
    return lambda data: _as_u8(nc.encode(np.ascontiguousarray(data)))


def sync_decoder(codec: Codec, spec: ArraySpec | None) -> Transform:
    """``f(bytes_u8) -> bytes_u8`` decoding with ``codec`` (1-D uint8 in and out)."""
    nc = _numcodec(codec)
    if nc is None:
        return _via_zarr_method(codec, _needed(codec, spec), "_decode_sync", "_decode_single")
    return lambda data: _as_u8(nc.decode(np.ascontiguousarray(data)))


def sync_row_transform(codec: Codec, decode: bool = False) -> Callable[[np.ndarray], np.ndarray] | None:
    """``f(rows) -> rows`` encoding (or decoding) every row of a uint8 ``(n, nbytes)`` array at
    once, for codecs whose output has the input's length and whose work is whole-array numpy
    operations (zopt's ``shuffle``); None for every other codec, which is then run row by row.
    """
    from zopt.codecs.shuffle import ShuffleCodec, shuffle_rows

    if isinstance(codec, ShuffleCodec):
        size = codec.element_size or 1
        return lambda rows: shuffle_rows(rows, size, decode)
    return None


def _zstd_settings(codec: Codec) -> tuple[int, bool] | None:
    """(level, checksum) of a zstd codec (zarr's or a numcodecs one), else None."""
    nc = _numcodec(codec)
    if isinstance(nc, numcodecs.Zstd):
        return int(nc.level), bool(getattr(nc, "checksum", False))
    return None


def _blosc_clevel(level: int) -> int | None:
    # c-blosc 1.x runs zstd at level 2*clevel - 1 for clevel 1..7, at max-2 (20) for 8 and at the
    # maximum (22) for 9; zstd's level 0 means its default, 3
    level = 3 if level == 0 else level
    if 1 <= level <= 13 and level % 2:
        return (level + 1) // 2
    return {20: 8, 22: 9}.get(level)


BATCH_MIN_ROW = 4096  # blosc clamps smaller forced block sizes; short rows go one call each


def zstd_row_sizes(codec: Codec) -> Callable[[np.ndarray], np.ndarray] | None:
    """``f(rows) -> sizes``: the zstd-encoded size in bytes (int64 ``(n,)``) of every row of a
    uint8 ``(n, nbytes)`` array, in one call for all rows; None for codecs other than zstd or
    levels c-blosc cannot express (even levels, negative levels, 14–19, 21).

    The rows go through numcodecs' blosc with the zstd compressor, no shuffle, and one blosc
    block per row: c-blosc compresses every block independently as one zstd frame at level
    ``2 * clevel - 1`` with one zstd context for all blocks and the GIL released for the whole
    call, and its block table gives each frame's size. The frames come from c-blosc's bundled
    zstd through ``ZSTD_compressCCtx``, so a size can differ by a few bytes from the frame
    numcodecs' ``Zstd`` (``ZSTD_compress2``) writes for the same row (≤ 10 bytes in 16 KiB on
    the plan-quality data); ``checksum`` adds its 4 bytes. Rows blosc stores uncompressed, a
    buffer blosc stores whole, rows shorter than 4 KiB or a header that does not describe one
    block per row fall back to numcodecs' ``Zstd`` row by row, whose sizes are exact.
    Used by the analysis for trial sizes only (it never decodes these frames).
    """
    settings = _zstd_settings(codec)
    if settings is None:
        return None
    level, checksum = settings
    clevel = _blosc_clevel(level)
    if clevel is None:
        return None
    exact = numcodecs.Zstd(level=level, checksum=checksum)
    from numcodecs import blosc

    def sizes(rows: np.ndarray) -> np.ndarray:
        n, width = rows.shape

        def per_row(ks: Iterable[int]) -> np.ndarray:
            return np.array([len(exact.encode(np.ascontiguousarray(rows[k]))) for k in ks], dtype=np.int64)

        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if width < BATCH_MIN_ROW or n * width > 2**31 - 2**20:
            return per_row(range(n))
        out = np.frombuffer(blosc.compress(np.ascontiguousarray(rows).reshape(-1), b"zstd", clevel, blosc.NOSHUFFLE, width), np.uint8)
        flags = int(out[2])
        nbytes, blocksize, ctbytes = (int(v) for v in out[4:16].view("<i4"))
        if flags & 0x02 or nbytes != n * width or blocksize != width or ctbytes != out.size:  # stored whole, or not one block per row
            return per_row(range(n))
        starts = out[16 : 16 + 4 * n].view("<i4").astype(np.int64)
        # each block is one stream: its compressed size (int32) and then the zstd frame
        found = out[(starts[:, None] + np.arange(4)).ravel()].view("<i4").astype(np.int64)
        found += 4 * checksum
        raw = found >= width + 4 * checksum  # blosc copied the block: zstd did not make it smaller
        if raw.any():
            found[raw] = per_row(np.flatnonzero(raw))
        return found

    return sizes
