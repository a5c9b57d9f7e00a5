"""Source chunks that are the target's inner chunks, decoded straight into a reused buffer.

When ``recompress`` rewrites a local Zarr v3 array whose chunks have exactly the target's inner
chunk shape and whose chain is ``[bytes]`` or ``[bytes, zstd]`` (little-endian or 1-byte
types, unsharded, regular grid), every inner chunk of the target is one source chunk file. The
shard writer then reads that file and zstd-decodes it into a per-thread buffer of the chunk's
size (``numcodecs.Zstd.decode(..., out=)``, which releases the GIL), instead of asking zarr for
the whole shard region and slicing a non-contiguous chunk out of it.

Measured on ``benchmarks/recompress.py``'s source (64³ float32 chunks, 1 MiB each): zarr's read
of a 256³ region costs 3.3 ms of CPU per MiB; file read + decode into the buffer 1.3 ms, with no
page faults (the buffer is reused), and the chunk needs no copy to become contiguous.

Any other source goes through ``zopt.job.read_source`` as before.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from zopt.compat.zarr_compat import endian_of, regular_chunk_shape
from zopt.errors import ChunkDecodeError

__all__ = ["AlignedChunkReader"]

_local = threading.local()


def _buffer(nbytes: int) -> np.ndarray:
    """This thread's decode buffer of ``nbytes`` bytes (reused from chunk to chunk)."""
    buf = getattr(_local, "buf", None)
    if buf is None or buf.size != nbytes:
        buf = _local.buf = np.empty(nbytes, dtype=np.uint8)
    return buf


def _read_file(f: Any) -> memoryview:
    """The whole of the open file ``f``, read into this thread's reused input buffer."""
    size = os.fstat(f.fileno()).st_size
    buf = getattr(_local, "blob", None)
    if buf is None or len(buf) < size:
        buf = _local.blob = bytearray(max(size, 2 * len(buf or b"")))
    view = memoryview(buf)[:size]
    got = 0
    while got < size:
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    return view[:got]


class AlignedChunkReader:
    """Reads whole source chunks of one array into a per-thread buffer (see module docstring).

    Build with ``open``; ``read(chunk_index)`` returns the chunk as a C-contiguous array of the
    chunk shape and native dtype, valid until the same thread's next ``read``.
    """

    def __init__(self, root: str, array: Any, native: np.dtype, zstd: Any | None) -> None:
        self.root = root
        self.array = array
        self.native = native
        self.chunk_shape = tuple(int(c) for c in array.metadata.chunk_grid.chunk_shape)
        self.nbytes = int(np.prod(self.chunk_shape)) * native.itemsize
        self.zstd = zstd  # a numcodecs.Zstd, or None for raw chunks

    @classmethod
    def open(cls, store: str | os.PathLike, name: str, inner_shape: tuple[int, ...], native: np.dtype) -> AlignedChunkReader | None:
        """A reader for array ``name`` of the local store ``store`` when its chunks are
        ``inner_shape``, its data type is ``native`` and its chain ``[bytes]`` or
        ``[bytes, zstd]`` with little-endian (or 1-byte) values; otherwise None."""
        import numcodecs
        import zarr
        from zarr.codecs import BytesCodec, ZstdCodec

        if not isinstance(store, str | os.PathLike):  # e.g. several files combined (zopt.io.multi)
            return None
        root = os.fspath(store)
        if not os.path.isfile(os.path.join(root, name, "zarr.json")):
            return None
        try:
            array = zarr.open_array(root, path=name, mode="r")
        except Exception:  # anything zarr cannot open here is read the general way
            return None
        meta = array.metadata
        if getattr(meta, "zarr_format", 3) != 3 or regular_chunk_shape(meta) != tuple(inner_shape):
            return None
        if np.dtype(array.dtype) != native or native.hasobject:
            return None
        codecs = tuple(meta.codecs)
        if not codecs or not isinstance(codecs[0], BytesCodec) or len(codecs) > 2:
            return None
        if native.itemsize > 1 and endian_of(codecs[0]) not in ("little", None) or not np.little_endian:
            return None
        zstd = None
        if len(codecs) == 2:
            if not isinstance(codecs[1], ZstdCodec):
                return None
            zstd = numcodecs.Zstd()
        return cls(root, array, native, zstd)

    def path(self, chunk_index: tuple[int, ...]) -> tuple[str, str]:
        key = self.array.metadata.chunk_key_encoding.encode_chunk_key(chunk_index)
        return key, os.path.join(self.root, self.array.path, *key.split("/"))

    def read(self, chunk_index: tuple[int, ...], fill: np.ndarray) -> np.ndarray:
        """Source chunk ``chunk_index`` (chunk shape, native dtype; absent: ``fill`` everywhere).

        Raises ChunkDecodeError naming the chunk key when its bytes do not decode to exactly one
        chunk.
        """
        key, path = self.path(chunk_index)
        buf = _buffer(self.nbytes)
        chunk = buf.view(self.native).reshape(self.chunk_shape)
        try:
            with open(path, "rb", buffering=0) as f:
                if self.zstd is None:
                    got = f.readinto(memoryview(buf))
                    if got != self.nbytes or f.read(1):
                        raise ValueError(f"{got} or more bytes, expected {self.nbytes}")
                    return chunk
                blob = _read_file(f)
        except FileNotFoundError:
            chunk[...] = fill
            return chunk
        except ValueError as exc:
            raise ChunkDecodeError(key, None, exc) from exc
        try:
            self.zstd.decode(blob, out=buf)
        except Exception as exc:  # numcodecs raises RuntimeError/ValueError for corrupt frames
            raise ChunkDecodeError(key, None, exc) from exc
        return chunk
