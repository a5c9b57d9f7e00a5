"""Reading raw-stored Zarr v3 chunks straight from their files: sample windows and regions.

When an array's chunks are stored raw — codec chain ``[bytes]``, or ``sharding_indexed`` whose
inner chain is ``[bytes]`` — in a local directory store, the file and byte offset of every
element are known. ``RawChunkReader`` then reads with positional reads (``os.preadv`` into numpy
buffers), without zarr's pipeline:

- ``read_windows``: only the sample windows the analysis (``zopt.planning.analysis``) trial-encodes —
  ``windows`` byte windows of each analysed chunk in C order spread through it, about
  ``1/fraction`` of it (``analysis_windows``): 12 windows, at least 1/16 of the bytes, instead of all. A
  window is cut into row segments along the last axis, or along the trailing axes the analysed
  chunk shares whole with the stored one (contiguous in the stored chunk too); the
  segments of one file are sorted and merged into ranges (gaps up to ``MERGE_GAP`` bytes are
  read through), one read per range.
- ``read_region``: any region, reading from each stored chunk only the rows (along the first
  axis) that the region covers, into one buffer; the engine uses it so that two tasks writing
  the two halves of one shard each read only their half of the source (one copy from the page
  cache, where zarr reads the whole chunk into bytes and then copies it).

This is the "write fast, compress later" case: a source written uncompressed is analysed and
recompressed at the cost of reading what is needed. Absent chunks read as the fill value.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from zopt.codecs.decisions import sample_windows
from zopt.compat.zarr_compat import chunk_shape_of, endian_of, item_size_of, regular_chunk_shape
from zopt.errors import OptionError, ZoptError

if TYPE_CHECKING:
    import zarr

    from zopt.store.shards import ShardLayout

__all__ = ["MIN_WINDOW", "RawChunkReader", "analysis_windows", "sampled_bytes"]

#: chunks of at most this many bytes are "sampled" whole
WHOLE_CHUNK_BYTES = 64 * 1024
#: the shortest spread window (bytes): a shorter one loses the codec's context (zstd matching a row
#: back) and costs a page read all the same (docs/benchmarks.md, "Where the analysis samples")
MIN_WINDOW = 4096
#: gaps of at most this many bytes between two wanted segments are read through (one read)
MERGE_GAP = 4096


def analysis_windows(nbytes: int, fraction: int, windows: int, min_window: int | None = MIN_WINDOW) -> list[tuple[int, int]]:
    """``(start, length)`` in bytes of the windows the analysis samples in a chunk of ``nbytes``.

    Spread (``min_window`` a byte count, the default): the chunk cut into ``windows`` equal
    strata, one window centred in each, every window ``max(min_window, nbytes / (fraction *
    windows))`` bytes (a multiple of 64, so whole elements of every item size dividing 64); so no
    part of the chunk weighs more than another, and its first and last rows (the polar or land
    rows of a lat-lon field) no more than any. The whole chunk when the windows would cover it
    (``windows * length > nbytes - 64 * windows``) or ``nbytes <= WHOLE_CHUNK_BYTES``.
    Ends (``min_window=None``): ``zopt.codecs.decisions.sample_windows``, evenly spaced from the
    chunk's first byte to its last: the analysis of zopt 0.1 (plans made then record it).
    """
    if nbytes <= WHOLE_CHUNK_BYTES:
        return [(0, nbytes)]
    if min_window is None:
        return sample_windows(nbytes, fraction, windows)
    return list(_spread_windows(int(nbytes), int(fraction), int(windows), int(min_window)))


@functools.lru_cache(maxsize=64)
def _spread_windows(nbytes: int, fraction: int, windows: int, min_window: int) -> tuple[tuple[int, int], ...]:
    # cached: every chunk of an array has the same size
    width = max(min_window, nbytes // (fraction * windows)) // 64 * 64 or 64
    if windows * width > nbytes - 64 * windows:
        return ((0, nbytes),)
    # centre of stratum k at (2k + 1) * nbytes / (2 * windows); starts rounded down to 64 bytes stay
    # inside their stratum because width <= nbytes / windows - 64
    return tuple((((2 * k + 1) * nbytes // (2 * windows) - width // 2) // 64 * 64, width) for k in range(windows))


def sampled_bytes(raw: np.ndarray, fraction: int, windows: int, min_window: int | None = MIN_WINDOW) -> np.ndarray:
    """The ``analysis_windows`` of ``raw`` (1-D uint8, a whole chunk) concatenated, uint8."""
    spans = analysis_windows(raw.size, fraction, windows, min_window)
    if spans == [(0, raw.size)]:
        return raw
    return np.concatenate([raw[s : s + n] for s, n in spans])


class _ShardReplaced(ZoptError):
    """A shard file was replaced (``zopt compact``, ``--in-place``) after its index was read."""


def _pread(fd: int, path: str, offset: int, out: np.ndarray) -> None:
    """Fill ``out`` (contiguous) from ``fd`` at ``offset``; OSError naming ``path`` when short."""
    from zopt.store.chunk_file import pread_into

    got = pread_into(fd, out, offset)  # a loop: one preadv returns at most ~2 GiB
    if got != out.nbytes:
        raise OSError(f"{path}: {got} bytes at offset {offset}, expected {out.nbytes} (truncated chunk file?)")


class RawChunkReader:
    """Positional reads from a raw-stored array in a local directory store.

    Build with ``RawChunkReader.open`` (None when the array is not raw-stored locally); then
    ``read_windows`` (analysed chunks whose shape divides the stored chunk shape,
    ``fits_windows``) and ``read_region``.
    """

    def __init__(self, root: str, array: zarr.Array[Any], stored_shape: tuple[int, ...], layout: ShardLayout | None, swap: bool) -> None:
        self.root = root
        self.array = array
        self.stored_shape = stored_shape  # shape of a raw stored chunk (the inner chunk when sharded)
        self.layout = layout  # zopt.store.shards.ShardLayout or None
        self.swap = swap  # stored in the other byte order: swap each element after reading
        self.itemsize = item_size_of(array.metadata)
        self.native = np.dtype(array.dtype)
        self._indexes: dict[tuple[int, ...], np.ndarray | None] = {}
        self._inodes: dict[str, tuple[tuple[int, ...], int]] = {}  # shard path -> (coords, inode its index came from)

    @classmethod
    def open(cls, store: str | os.PathLike[str], array: zarr.Array[Any]) -> RawChunkReader | None:
        """A reader for ``array`` (a zarr.Array opened from ``store``), or None when it is not a
        Zarr v3 array with a regular chunk grid stored raw in a local directory."""
        from zarr.codecs import BytesCodec
        from zarr.core.metadata import ArrayV3Metadata

        from zopt.store.shards import layout_of

        root = os.fspath(store)
        meta = array.metadata
        if not os.path.isdir(root) or not isinstance(meta, ArrayV3Metadata):
            return None
        if regular_chunk_shape(meta) is None:
            return None
        try:
            item = item_size_of(meta)
        except (AttributeError, TypeError, NotImplementedError):
            return None
        if 64 % item or np.dtype(array.dtype).itemsize != item:
            return None
        layout = layout_of(array)
        chain = layout.inner_codecs if layout is not None else tuple(meta.codecs)
        if layout is not None and len(meta.codecs) != 1:
            return None
        if len(chain) != 1 or not isinstance(chain[0], BytesCodec):
            return None
        endian = endian_of(chain[0])
        swap = item > 1 and endian is not None and endian != ("little" if np.little_endian else "big")
        stored = layout.inner_shape if layout is not None else chunk_shape_of(meta)
        return cls(root, array, tuple(int(x) for x in stored), layout, swap)

    def fits_windows(self, chunk_shape: Sequence[int]) -> bool:
        """True when analysed chunks of ``chunk_shape`` nest in the stored chunks."""
        return len(chunk_shape) == len(self.stored_shape) and all(
            s % int(c) == 0 for s, c in zip(self.stored_shape, chunk_shape, strict=True))

    def _file(self, stored_index: tuple[int, ...]) -> tuple[str, int | None]:
        """(path, base byte offset or None when the stored chunk is absent) of a raw chunk."""
        meta = self.array.metadata
        if self.layout is None:
            key = meta.encode_chunk_key(stored_index)
            return os.path.join(self.root, self.array.path, key), 0
        cps = self.layout.chunks_per_shard
        shard = tuple(i // n for i, n in zip(stored_index, cps, strict=True))
        key = meta.encode_chunk_key(shard)
        path = os.path.join(self.root, self.array.path, key)
        if shard not in self._indexes:
            from zopt.store.shards import read_index_stat

            try:
                table, st = read_index_stat(path, self.layout, key)
            except FileNotFoundError:
                table = None
            else:
                self._inodes[path] = (shard, st.st_ino)
            self._indexes[shard] = table
        table = self._indexes[shard]
        if table is None:
            return path, None
        i = int(np.ravel_multi_index(tuple(r % n for r, n in zip(stored_index, cps, strict=True)), cps))
        offset, nbytes = int(table[i, 0]), int(table[i, 1])
        if offset == 2**64 - 1:
            return path, None
        expected = math.prod(self.stored_shape) * self.itemsize
        if nbytes != expected:
            from zopt.store.shards import ShardIndexError

            raise ShardIndexError(key, f"inner chunk {i} has {nbytes} bytes, a raw chunk of {self.stored_shape} has {expected}")
        return path, offset

    def read_windows(self, chunk_shape: Sequence[int], chunk_indices: Sequence[tuple[int, ...]], fraction: int,
                     windows: int, fill: np.ndarray, min_window: int | None = MIN_WINDOW) -> tuple[np.ndarray, np.ndarray]:
        """The samples of whole chunks of the analysed grid.

        chunk_shape : the analysed chunk shape; ``fits_windows(chunk_shape)`` must hold.
        chunk_indices : n chunk coordinates; each chunk must lie inside the array (no edge
            chunks: their padding is not stored).
        fraction, windows, min_window : as ``analysis_windows``.
        fill : the fill value, a 0-d array of the array's native dtype (absent chunks).
        Returns ``(samples, absent)``: uint8 ``(n, sample_bytes)`` in native byte order, and a
        bool ``(n,)`` that is True where the chunk is not stored (all fill value).
        Raises ShardIndexError naming the shard when a shard's index is corrupt, OSError when a
        chunk file is shorter than its chunk.
        """
        c, s, item = tuple(int(x) for x in chunk_shape), self.stored_shape, self.itemsize
        if not self.fits_windows(c):
            raise OptionError("chunk_shape", f"{c} does not divide the stored chunk shape {s}")
        n = len(chunk_indices)
        spans = analysis_windows(math.prod(c) * item, fraction, windows, min_window)
        width = sum(length for _, length in spans)
        out = np.empty((n, width), dtype=np.uint8)
        absent = np.zeros(n, dtype=bool)
        if n == 0:
            return out, absent
        origin = np.asarray(chunk_indices, dtype=np.int64) * np.asarray(c, dtype=np.int64)  # (n, ndim)
        stored = origin // np.asarray(s, dtype=np.int64)
        inside = origin - stored * np.asarray(s, dtype=np.int64)
        # trailing dimensions the analysed chunk shares whole with the stored one are contiguous in
        # both: merged into one "row", so a window is a few long segments, not one per short row
        k0 = len(c) - 1
        while k0 > 0 and c[k0] == s[k0]:
            k0 -= 1
        c, s = (*c[:k0], math.prod(c[k0:])), (*s[:k0], math.prod(s[k0:]))
        inside = np.concatenate([inside[:, :k0], inside[:, k0 : k0 + 1] * math.prod(self.stored_shape[k0 + 1 :])], axis=1)
        # row segments of the windows, in elements of the analysed chunk: (row coords, first column, length, dest)
        seg_rows, seg_col, seg_len, seg_dest = [], [], [], []
        dest = 0
        for start, length in spans:
            e0, e1 = start // item, (start + length) // item
            for row in range(e0 // c[-1], (e1 - 1) // c[-1] + 1):
                lo, hi = max(e0, row * c[-1]), min(e1, (row + 1) * c[-1])
                seg_rows.append(np.unravel_index(row, c[:-1]) if len(c) > 1 else ())
                seg_col.append(lo - row * c[-1])
                seg_len.append(hi - lo)
                seg_dest.append(dest + (lo - e0) * item)
            dest += length
        rows = np.array(seg_rows, dtype=np.int64).reshape(len(seg_rows), len(c) - 1)
        col = np.array(seg_col, dtype=np.int64)
        nbytes = np.array(seg_len, dtype=np.int64) * item
        dests = np.array(seg_dest, dtype=np.int64)
        # element offset of every segment inside its stored chunk: (n, segments)
        strides = np.array([math.prod(s[k + 1 :]) for k in range(len(s))], dtype=np.int64)
        first = (inside[:, None, :-1] + rows[None]) @ strides[:-1] + inside[:, None, -1] + col[None]
        byte_off = first * item
        groups: dict[tuple[int, ...], list[int]] = {}
        for k, key in enumerate(map(tuple, stored.tolist())):
            groups.setdefault(key, []).append(k)
        fill_row = None
        for key, members in groups.items():
            for attempt in range(2):
                path, base = self._file(key)
                if base is None or not os.path.exists(path):
                    if fill_row is None:
                        fill_row = np.resize(np.ascontiguousarray(fill).view(np.uint8), width)
                    out[members] = fill_row
                    absent[members] = True
                    break
                try:
                    self._read_group(path, base, members, byte_off, nbytes, dests, out)
                    break
                except _ShardReplaced as exc:
                    self._replaced(path, exc, attempt)
        if self.swap:
            out.view(f"u{item}")[...] = out.view(f"u{item}").byteswap()
        return out, absent

    def _open(self, path: str) -> int:
        """An fd of ``path``; raises _ShardReplaced when it is not the file its index came from."""
        from zopt.store.chunk_file import open_regular

        fd, st = open_regular(path, os.path.relpath(path, self.root), self.root)  # a FIFO or device: refused unread
        known = self._inodes.get(path)
        if known is not None and st.st_ino != known[1]:
            os.close(fd)
            raise _ShardReplaced(path)
        return fd

    def _replaced(self, path: str, exc: _ShardReplaced, attempt: int) -> None:
        """Forget the index of a replaced shard (read again on the retry); the second time, raise
        ChunkDecodeError naming the shard."""
        shard, _ = self._inodes.pop(path)
        self._indexes.pop(shard, None)
        if attempt:
            from zopt.errors import ChunkDecodeError

            key = os.path.relpath(path, self.root)
            raise ChunkDecodeError(key, None, RuntimeError("the shard was replaced twice while it was being read")) from exc

    def _read_group(self, path: str, base: int, members: list[int], byte_off: np.ndarray, nbytes: np.ndarray,
                    dests: np.ndarray, out: np.ndarray) -> None:
        """Read the segments of chunks ``members`` (all in one file) into their rows of ``out``."""
        m = np.asarray(members)
        starts = (byte_off[m] + base).ravel()
        lens = np.broadcast_to(nbytes, byte_off[m].shape).ravel()
        which = np.repeat(m, byte_off.shape[1])
        where = np.broadcast_to(dests, byte_off[m].shape).ravel()
        order = np.argsort(starts, kind="stable")
        starts, lens, which, where = starts[order], lens[order], which[order], where[order]
        ends = starts + lens
        # a new range wherever the gap to the furthest end so far exceeds MERGE_GAP
        reach = np.maximum.accumulate(ends)
        new = np.ones(starts.size, dtype=bool)
        new[1:] = starts[1:] - reach[:-1] > MERGE_GAP
        range_id = np.cumsum(new) - 1
        r_start = starts[new]
        r_end = np.maximum.reduceat(ends, np.flatnonzero(new))
        # every range read into one buffer, then each segment copied to its row of ``out``
        at = np.concatenate(([0], np.cumsum(r_end - r_start)))
        seg_len = int(lens[0])
        aligned = seg_len > 0 and not (lens != seg_len).any() and out.shape[1] % seg_len == 0
        big = np.empty(int(-(-at[-1] // seg_len) * seg_len) if aligned else int(at[-1]), dtype=np.uint8)
        fd = self._open(path)
        try:
            for lo, hi, pos in zip(r_start.tolist(), r_end.tolist(), at.tolist(), strict=False):
                _pread(fd, path, lo, big[pos : pos + hi - lo])
        finally:
            os.close(fd)
        src = starts - r_start[range_id] + at[range_id]
        if aligned and not (src % seg_len).any() and not (where % seg_len).any():
            # equal, aligned segments (the usual case): one gather of whole rows of seg_len bytes
            out.reshape(out.shape[0], -1, seg_len)[which, where // seg_len] = big.reshape(-1, seg_len)[src // seg_len]
            return
        for k, pos, length, w in zip(which.tolist(), src.tolist(), lens.tolist(), where.tolist(), strict=True):
            out[k, w : w + length] = big[pos : pos + length]

    def read_region(self, region: Sequence[slice], fill: np.generic | float) -> np.ndarray:
        """The values of ``region`` (slices with non-negative starts and stops, step 1, inside
        the array; a stop below its start reads nothing), as a new C-ordered array of the
        array's native dtype.

        From every stored chunk the region overlaps, the rows of its first axis that the region
        covers are read (contiguous bytes) into one buffer and the overlap is copied out.
        Absent chunks give ``fill``. Raises OSError naming the file when a chunk file is short,
        ShardIndexError naming the shard when a shard's index is corrupt.
        """
        s = self.stored_shape
        region = tuple(slice(r.start, max(r.start, r.stop)) for r in region)  # an empty part of an edge shard
        out = np.empty(tuple(r.stop - r.start for r in region), dtype=self.native)
        if out.size == 0:
            return out
        row_elems = math.prod(s[1:])
        first = [r.start // n for r, n in zip(region, s, strict=True)]
        last = [(r.stop - 1) // n for r, n in zip(region, s, strict=True)]
        for idx in np.ndindex(*[b - a + 1 for a, b in zip(first, last, strict=True)]):
            stored = tuple(a + i for a, i in zip(first, idx, strict=True))
            lo = [max(r.start, k * n) for r, k, n in zip(region, stored, s, strict=True)]
            hi = [min(r.stop, (k + 1) * n) for r, k, n in zip(region, stored, s, strict=True)]
            dest = tuple(slice(a - r.start, b - r.start) for a, b, r in zip(lo, hi, region, strict=True))
            r0, r1 = lo[0] - stored[0] * s[0], hi[0] - stored[0] * s[0]
            buf = np.empty((r1 - r0, *s[1:]), dtype=self.native)
            rows: np.ndarray | None = buf
            for attempt in range(2):
                path, base = self._file(stored)
                if base is None or not os.path.exists(path):
                    rows = None
                    break
                try:
                    fd = self._open(path)
                except _ShardReplaced as exc:
                    self._replaced(path, exc, attempt)
                    continue
                try:
                    _pread(fd, path, base + r0 * row_elems * self.itemsize, buf)
                finally:
                    os.close(fd)
                break
            if rows is None:
                out[dest] = fill
                continue
            inner = (slice(None),) + tuple(slice(a - k * n, b - k * n) for a, b, k, n in zip(lo[1:], hi[1:], stored[1:], s[1:], strict=True))
            part = rows[inner]
            out[dest] = part.byteswap() if self.swap else part
        return out
