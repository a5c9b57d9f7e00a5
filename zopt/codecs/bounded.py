"""Decoding hostile bytes with bounded memory, and decode errors that name codec and chunk.

A zstd frame header may claim any content size (RFC 8878 §3.1.1.1.4, ``Frame_Content_Size``):
numcodecs' ``Zstd.decode`` allocates what the header claims, so a chunk of a few bytes can ask
for gigabytes. ``zstd_decode_bounded`` reads the claim first and refuses one above the most the
chunk can hold (computed from the chunk's shape and data type by the caller), then decodes into
a buffer of exactly the claimed size (``Zstd.decode(buf, out=...)``; numcodecs raises
``ValueError`` when the frame needs more).

``decode_error`` turns any exception of a codec's decoding into ``ChunkDecodeError`` (a
``ZoptError`` and a ``ValueError``) naming the codec and the chunk being decoded (from
``zopt.codecs.context.current_chunk``, when zopt's pipeline or a zopt reader set it).
"""

from __future__ import annotations

import numpy as np

from zopt.errors import ChunkDecodeError

__all__ = ["bytes_bound", "decode_error", "raw_nbytes", "zstd_content_size", "zstd_decode_bounded"]

_MAGIC = 0xFD2FB528


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

    nc = numcodecs.Zstd()
    claimed = zstd_content_size(data)
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


def raw_nbytes(spec: object) -> int:
    """Bytes of one decoded chunk of ``spec`` (a zarr ``ArraySpec``): shape × item size."""
    n = int(np.prod(spec.shape, dtype=np.int64))  # type: ignore[attr-defined]
    dtype = spec.dtype  # type: ignore[attr-defined]
    size = getattr(dtype, "item_size", None)
    return n * (size if size is not None else dtype.to_native_dtype().itemsize)


def bytes_bound(codec: object, n: int, spec: object) -> int | None:
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
        return int(codec.compute_encoded_size(n, spec))  # type: ignore[attr-defined]
    except (NotImplementedError, AttributeError, TypeError, ValueError):
        return None


def decode_error(codec: str, exc: BaseException) -> ChunkDecodeError:
    """``ChunkDecodeError`` for a failure of ``codec`` (its name) decoding the current chunk."""
    if isinstance(exc, ChunkDecodeError):
        return exc
    from zopt.codecs.context import current_chunk

    ctx = current_chunk()
    return ChunkDecodeError(None if ctx is None else ctx.key, None if ctx is None else ctx.coords_in_shard, exc, codec=codec)
