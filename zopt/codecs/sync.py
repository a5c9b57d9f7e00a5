"""Synchronous encode/decode for the bytes→bytes codecs the ``conditional`` codec wraps.

zarr-python's codec API is asynchronous and its built-in compressors hop to a thread per call.
The ``conditional`` codec runs a chunk's whole decision (several trial encodings) in one worker
thread instead, so it needs plain functions: the numcodecs object behind zarr's zstd, gzip and
blosc codecs and behind zarr's ``numcodecs.*`` wrappers (numcodecs releases the GIL while
compressing), zopt's own ``shuffle``, zarr's synchronous ``_encode_sync``/``_decode_sync``
where a codec has them (crc32c), and, for any other codec, its async method run on a private
event loop in the calling thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import numcodecs
import numpy as np

__all__ = ["sync_decoder", "sync_encoder", "sync_row_transform"]

Transform = Callable[[np.ndarray], np.ndarray]


def _as_u8(out: Any) -> np.ndarray:
    return np.frombuffer(out, dtype=np.uint8) if isinstance(out, bytes | bytearray | memoryview) else np.asarray(out).view(np.uint8).ravel()


def _numcodec(codec: Any) -> Any | None:
    try:
        return _numcodec_cached(codec)
    except TypeError:  # unhashable codec objects (zarr's numcodecs.* wrappers hold a dict)
        return _numcodec_uncached(codec)


@functools.lru_cache(maxsize=256)
def _numcodec_cached(codec: Any) -> Any | None:
    return _numcodec_uncached(codec)


def _numcodec_uncached(codec: Any) -> Any | None:
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

    def __init__(self, codec: Any) -> None:
        self.codec = codec

    def encode(self, data: np.ndarray) -> np.ndarray:
        return self.codec.encode_bytes(data)

    def decode(self, data: np.ndarray) -> np.ndarray:
        return self.codec.decode_bytes(data)


def _via_zarr_method(codec: Any, spec: Any, sync_name: str, async_name: str) -> Transform:
    # zarr's synchronous method where the codec has one (crc32c, gzip, blosc), else its async
    # method on a private event loop in the calling thread
    sync_fn = getattr(codec, sync_name, None)

    def run(data: np.ndarray) -> np.ndarray:
        buf = spec.prototype.buffer.from_array_like(np.ascontiguousarray(data))
        out = sync_fn(buf, spec) if sync_fn is not None else asyncio.run(getattr(codec, async_name)(buf, spec))
        return np.asarray(out.as_numpy_array()).view(np.uint8).ravel()

    return run


def sync_encoder(codec: Any, spec: Any) -> Transform:
    """``f(bytes_u8) -> bytes_u8`` encoding with ``codec`` (1-D uint8 in and out)."""
    nc = _numcodec(codec)
    if nc is None:
        return _via_zarr_method(codec, spec, "_encode_sync", "_encode_single")
    return lambda data: _as_u8(nc.encode(np.ascontiguousarray(data)))


def sync_decoder(codec: Any, spec: Any) -> Transform:
    """``f(bytes_u8) -> bytes_u8`` decoding with ``codec`` (1-D uint8 in and out)."""
    nc = _numcodec(codec)
    if nc is None:
        return _via_zarr_method(codec, spec, "_decode_sync", "_decode_single")
    return lambda data: _as_u8(nc.decode(np.ascontiguousarray(data)))


def sync_row_transform(codec: Any, decode: bool = False) -> Callable[[np.ndarray], np.ndarray] | None:
    """``f(rows) -> rows`` encoding (or decoding) every row of a uint8 ``(n, nbytes)`` array at
    once, for codecs whose output has the input's length and whose work is one numpy copy
    (zopt's ``shuffle``); None for every other codec, which is then run row by row.
    """
    from zopt.codecs.shuffle import ShuffleCodec, shuffle_rows

    if isinstance(codec, ShuffleCodec):
        size = codec.element_size or 1
        return lambda rows: shuffle_rows(rows, size, decode)
    return None
