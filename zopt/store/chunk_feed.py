"""Source chunks that are the target's inner chunks, decoded straight into a reused buffer.

When ``recompress`` rewrites a local Zarr v3 array whose chunks have exactly the target's inner
chunk shape and whose chain is ``[bytes]`` or ``[bytes, zstd]`` (little-endian or 1-byte
types, unsharded, regular grid), every inner chunk of the target is one source chunk file. The
shard writer then reads that file and zstd-decodes it into a per-thread buffer of the chunk's
size, instead of asking zarr for the whole shard region and slicing a non-contiguous chunk out
of it.

Measured on ``benchmarks/recompress.py``'s source (64³ float32 chunks, 1 MiB each): zarr's read
of a 256³ region costs 3.3 ms of CPU per MiB; file read + decode into the buffer 1.3 ms, with no
page faults (the buffer is reused), and the chunk needs no copy to become contiguous.

Per chunk the GIL is held only between calls that release it (issue 34): ``os.open`` (with
``O_NONBLOCK``: a FIFO or a device under the chunk's name is refused by ``fstat`` before any read,
``zopt.store.chunk_file``), the reads into this thread's input buffer (a file larger than any zstd
frame of one chunk, 1 KiB spare, is refused by its size, unread; one whose size changes while it
is read is refused), ``os.close`` and the zstd decode
(``zopt.compat.libzstd``, the library numcodecs bundles, with this thread's context; numcodecs'
``Zstd.decode(out=)`` where that is not available). A frame that decodes to any other size than
one chunk is an error naming the chunk key, never a chunk partly left from the one before.

``read_many`` reads many chunks into a stack (``(n, *chunk shape)``) for the batch encoder
(``zopt.codecs.batch``, issue 34 part 2): the files one after the other in a loop with nothing
else in it — raw chunks straight into their rows, zstd frames back to back into this thread's
input buffer of about the batch's decoded size (then one by one) — and all the frames decoded with one call (``libzstd.decompress_frames``, which
checks that each file is exactly one frame of one chunk). Where that does not hold (a file longer
than any frame of one chunk, a frame of another size, corrupt bytes) the chunks are read one by one
as ``read`` does, which names the chunk at fault. Where zopt's compiled loops are available
(``zopt.compat.loops``) the files are read by one foreign call, with no Python between two files.

Any other source goes through ``zopt.job.read_source`` as before.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from zopt.compat import libzstd, loops
from zopt.compat.zarr_compat import chunk_shape_of, endian_of, regular_chunk_shape
from zopt.errors import ChunkDecodeError
from zopt.store.chunk_file import CHANGED, open_regular, read_chunk_file, read_into, refused

if TYPE_CHECKING:
    import zarr

__all__ = ["AlignedChunkReader"]

_local = threading.local()


def _buffers(nbytes: int, native: np.dtype, shape: tuple[int, ...], blob_nbytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This thread's decode buffer of ``nbytes`` bytes (reused from chunk to chunk), a view of it
    as a chunk of ``shape`` and ``native`` type, and its input buffer of at least ``blob_nbytes``."""
    key = (nbytes, native, shape)
    views = getattr(_local, "views", None)
    if views is None or views[0] != key:
        buf = np.empty(nbytes, dtype=np.uint8)
        views = _local.views = (key, buf, buf.view(native).reshape(shape))
    blob = getattr(_local, "blob", None)
    if blob is None or blob.size < blob_nbytes:
        blob = _local.blob = np.empty(max(blob_nbytes, 2 * (0 if blob is None else blob.size)), dtype=np.uint8)
    return views[1], views[2], blob


class AlignedChunkReader:
    """Reads whole source chunks of one array into a per-thread buffer (see module docstring).

    Build with ``open``; ``read(chunk_index)`` returns the chunk as a C-contiguous array of the
    chunk shape and native dtype, valid until the same thread's next ``read``.
    """

    def __init__(self, root: str, array: zarr.Array[Any], native: np.dtype, zstd: Any | None) -> None:
        self.root = root
        self.array = array
        self.native = native
        self.chunk_shape = chunk_shape_of(array.metadata)
        self.nbytes = int(np.prod(self.chunk_shape)) * native.itemsize
        self.zstd = zstd  # a numcodecs.Zstd, or None for raw chunks
        self._encode_key = array.metadata.encode_chunk_key
        self._prefix = os.path.join(root, array.path, "")
        # the most bytes a chunk file may hold (a chunk's largest zstd frame, 1 KiB spare): a
        # larger file is refused by its size (fstat), unread
        self._bound = libzstd.compress_bound(self.nbytes) + 1024 if zstd is not None else self.nbytes
        # a batch's frames are read back to back into at most this many bytes per chunk (then one
        # by one): about the data's size, however small the chunks (a frame's bound is 2x a 64-byte chunk)
        self._room = self.nbytes + (self.nbytes >> 7) + 64
        self._direct_zstd = zstd is not None and libzstd.available()

    @classmethod
    def open(cls, store: object, name: str, inner_shape: tuple[int, ...], native: np.dtype) -> AlignedChunkReader | None:
        """A reader for array ``name`` of the local store ``store`` (a path; anything else: None) when its chunks are
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
        codecs = tuple(getattr(meta, "codecs", ()))  # a v3 array here (zarr_format checked above)
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
        key = self._encode_key(chunk_index)
        return key, self._prefix + (key if os.sep == "/" else os.path.join(*key.split("/")))

    def read(self, chunk_index: tuple[int, ...], fill: np.ndarray) -> np.ndarray:
        """Source chunk ``chunk_index`` (chunk shape, native dtype; absent: ``fill`` everywhere).

        Raises ChunkDecodeError naming the chunk key when its bytes do not decode to exactly one
        chunk.
        """
        key = self._encode_key(chunk_index)
        buf, chunk, blob = _buffers(self.nbytes, self.native, self.chunk_shape, self._bound + 1)
        path = self._prefix + key if os.sep == "/" else self.path(chunk_index)[1]
        where = self._where(key)
        if self.zstd is None:
            try:
                fd, st = open_regular(path, where, self.root)
            except FileNotFoundError:
                chunk[...] = fill
                return chunk
            self._read_exact(fd, st.st_size, buf, blob[:1], where)  # one byte more tells a file that grew
            return chunk
        try:
            data = read_chunk_file(path, self._bound, where, self.root, out=blob)
        except FileNotFoundError:
            chunk[...] = fill
            return chunk
        try:
            if self._direct_zstd:  # the GIL is released for the whole decode (zopt.compat.libzstd)
                libzstd.decompress_into(data, buf, self.nbytes)
            elif self.zstd.decode(data, out=buf).nbytes != self.nbytes:
                raise ValueError(f"zstd frame holds fewer bytes than the {self.nbytes} of a chunk")
        except Exception as exc:  # numcodecs raises RuntimeError/ValueError for corrupt frames
            raise ChunkDecodeError(where, None, exc, store=self.root) from exc
        return chunk

    def _where(self, key: str) -> str:
        """The store key of the chunk whose key in the array is ``key`` (named in the errors)."""
        return f"{self.array.path}/{key}" if self.array.path else key

    def read_many(self, indices: Sequence[tuple[int, ...]], out: np.ndarray, fill: np.ndarray) -> None:
        """Source chunks ``indices`` into ``out`` (C-contiguous ``(len(indices), *chunk shape)``,
        native type); an absent chunk is ``fill`` everywhere. Raises ChunkDecodeError naming the
        chunk key when a chunk's bytes do not decode to exactly one chunk (see module docstring).
        """
        n = len(indices)
        rows = out.reshape(n, -1).view(np.uint8)
        # the paths first: the loops below run nothing but the system calls (Python runs cold
        # after each read of a chunk)
        encode, prefix = self._encode_key, self._prefix
        paths = [prefix + encode(i) for i in indices] if os.sep == "/" else [self.path(i)[1] for i in indices]
        missing: list[int] = []
        if loops.available():  # every file's open/read/close in one foreign call
            absent = self._read_compiled(indices, paths, rows, fill)
            for k in np.flatnonzero(absent).tolist():
                out[k] = fill
            return
        if self.zstd is None:
            for k in range(n):  # each file opened without waiting, checked to be regular and of one chunk's size
                if self._read_raw(paths[k], indices[k], rows[k]):
                    missing.append(k)
        else:
            blob = self._blob(n)
            room = blob.size
            ends: list[int] = []
            off = 0
            whole = True  # every file fits in the blob and is no longer than the bound
            for k in range(n):
                try:
                    fd, st = open_regular(paths[k], self._where(encode(indices[k])), self.root)
                except FileNotFoundError:
                    missing.append(k)
                    ends.append(off)
                    continue
                try:
                    size = st.st_size
                    if size > self._bound or off + size > room:
                        whole = False  # read one by one below (a file over its bound is refused there)
                        break
                    got = read_into(fd, blob[off : off + size])
                finally:
                    os.close(fd)
                if got != size:  # the file shrank: read one by one below, which names it
                    whole = False
                    break
                off += size
                ends.append(off)
            gone = set(missing)
            present = [k for k in range(n) if k not in gone]
            if not (whole and self._direct_zstd and self._decode_runs(blob, np.array(ends, dtype=np.int64)[present],
                                                                      present, rows)):
                missing = []
                for k in range(n):  # one by one: names the chunk at fault
                    rows[k] = self.read(indices[k], fill).reshape(-1).view(np.uint8)
        for k in missing:
            out[k] = fill

    def _blob(self, n: int) -> np.ndarray:
        """This thread's input buffer for the frames of ``n`` chunks read back to back: about the
        chunks' decoded size (``_room`` each), reused from batch to batch."""
        blob = getattr(_local, "many", None)
        want = n * self._room
        if blob is None or blob.size < want or blob.size > 2 * want:
            blob = _local.many = np.empty(want, dtype=np.uint8)
        return blob

    def _read_raw(self, path: str, index: tuple[int, ...], row: np.ndarray) -> bool:
        """Read the raw chunk file ``path`` into ``row`` (one chunk's bytes); True when absent."""
        where = self._where(self._encode_key(index))
        try:
            fd, st = open_regular(path, where, self.root)
        except FileNotFoundError:
            return True
        self._read_exact(fd, st.st_size, row, np.empty(1, dtype=np.uint8), where)
        return False

    def _read_exact(self, fd: int, size: int, out: np.ndarray, extra: np.ndarray, where: str) -> None:
        """Read a raw chunk of ``self.nbytes`` from ``fd`` (closed here) into ``out``; ``extra`` (one
        byte) tells a file that grew. Raises ChunkDecodeError naming ``where`` for another size."""
        try:
            if size != self.nbytes:
                raise refused(where, f"{size} bytes, expected {self.nbytes}", self.root)
            got = read_into(fd, out) + read_into(fd, extra)
        finally:
            os.close(fd)
        if got != self.nbytes:
            raise refused(where, f"{CHANGED}: {self.nbytes} bytes, then {got}{' or more' if got > self.nbytes else ''}",
                          self.root)

    def _read_compiled(self, indices: Sequence[tuple[int, ...]], paths: list[str], rows: np.ndarray, fill: np.ndarray
                       ) -> np.ndarray:
        """``read_many`` with the files read (and zstd frames checked and decoded) by one call of
        ``zopt.compat.loops``. Returns the chunks without a file (bool ``(n,)``), left for the
        caller to fill."""
        n = len(paths)
        try:
            if self.zstd is None:
                sizes = loops.read_files(paths, rows.reshape(-1), rows.shape[1], self.nbytes)
                missing: np.ndarray = sizes == -errno.ENOENT
                bad = np.flatnonzero((sizes != self.nbytes) & ~missing)
                if bad.size:
                    k = int(bad[0])
                    got = int(sizes[k])
                    raise refused(self._where(self._encode_key(indices[k])),
                                  f"{got} or more bytes, expected {self.nbytes}", self.root)
                return missing
            decoded = None
            if self._direct_zstd:  # read, checked and decoded in one foreign call
                decoded = libzstd.read_frames(paths, self._blob(n), self._bound, rows, self.nbytes)
        except loops.FileRefused as exc:
            raise refused(self._where(self._encode_key(indices[exc.index])), exc.why, self.root) from exc
        if decoded is not None:
            absent: np.ndarray = decoded == -errno.ENOENT
            return absent
        for k in range(n):  # one by one: names the chunk at fault (a missing one is the fill value)
            rows[k] = self.read(indices[k], fill).reshape(-1).view(np.uint8)
        return np.zeros(n, dtype=bool)

    def _decode_runs(self, blob: np.ndarray, ends: np.ndarray, present: list[int], rows: np.ndarray) -> bool:
        """Decode the frames of ``present`` chunks (consecutive runs of rows: one call each)."""
        first = 0
        starts = [0, *ends.tolist()]
        for j in range(1, len(present) + 1):
            if j == len(present) or present[j] != present[j - 1] + 1:
                lo, hi = present[first], present[j - 1] + 1
                run = blob[starts[first] : int(ends[j - 1])]
                if not libzstd.decompress_frames(run, ends[first:j] - starts[first], rows[lo:hi], self.nbytes):
                    return False
                first = j
        return True
