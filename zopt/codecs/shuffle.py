"""``shuffle``: the byte shuffle filter as the ``conditional`` spec's examples name it.

Configuration ``{"element_size": n}`` (bytes per element). Byte ``b`` of element ``e`` moves to
position ``b * n_elements + e``; trailing bytes that do not fill an element stay in place, as
blosc's shuffle leaves them (``numcodecs.Shuffle`` refuses such lengths; for whole elements the
bytes are those ``numcodecs.Shuffle`` produces, tested byte for byte against it).

Both directions are numpy whole-array operations, which release the GIL, rather than
``numcodecs.Shuffle``, whose Cython loop holds it (threads shuffling different chunks would
run one at a time). Shuffling is one transposed copy (its inner loop reads with a stride and
writes contiguously: faster than numcodecs). Unshuffling the same way would write 2-8 bytes
per inner loop (3× slower than numcodecs), so on little-endian machines, for element sizes
that are multiples of 2, 4 or 8 bytes, each word is assembled from its byte planes with
shifts and ors (``(plane[b] << 8) | plane[b - 1]`` …): SIMD ufuncs writing whole words
(``benchmarks/shuffle.py``, 256 KiB-1 MiB chunks: 2.6-3×, 1.3-1.5× and 0.87-0.97× numcodecs'
speed for 2-, 4- and 8-byte elements). Other sizes keep the transposed copy.
If ``element_size`` is omitted it is taken from the array's data type when the array is created.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import parse_named_configuration

from zopt.errors import OptionError

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = ["ShuffleCodec", "shuffle_rows"]


def shuffle_rows(rows: np.ndarray, size: int, inverse: bool) -> np.ndarray:
    """Byte-shuffle (or, with ``inverse``, unshuffle) every row of uint8 ``rows`` (n, nbytes).

    Returns a new (n, nbytes) uint8 array, all rows at once, so the analysis shuffles a task's
    samples in one call. Trailing bytes of a row that do not fill an element stay in place.
    """
    n_rows, width = rows.shape
    n = width // size * size
    if size == 1 or n == 0:
        return rows.copy()
    out = np.empty_like(rows)
    if inverse and _word_size(size):
        _unshuffle_words(rows[:, :n].reshape(n_rows, size, -1), out[:, :n], size)
        out[:, n:] = rows[:, n:]
        return out
    body = rows[:, :n].reshape(n_rows, size, -1) if inverse else rows[:, :n].reshape(n_rows, -1, size)
    moved = body.transpose(0, 2, 1)
    if n == width:  # one copy into the output
        out.reshape(moved.shape)[...] = moved
    else:  # the body columns of ``out`` are not contiguous rows: copy through a temporary
        out[:, :n] = moved.reshape(n_rows, n)
        out[:, n:] = rows[:, n:]
    return out


_WORDS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _word_size(size: int) -> int:
    """Bytes per word for the shift-and-or unshuffle (8, 4 or 2 dividing ``size``), else 0."""
    if sys.byteorder != "little":
        return 0
    return next((w for w in (8, 4, 2) if size % w == 0), 0)


def _assemble(planes: np.ndarray, word: np.ndarray) -> None:
    """``word[...] = planes[..., 0, :] | planes[..., 1, :] << 8 | …`` (little-endian words), in place."""
    k = planes.shape[-2]
    np.copyto(word, planes[..., k - 1, :], casting="unsafe")
    for b in range(k - 2, -1, -1):
        np.left_shift(word, 8, out=word)
        np.bitwise_or(word, planes[..., b, :], out=word, casting="unsafe")


def _unshuffle_words(planes: np.ndarray, out: np.ndarray, size: int) -> None:
    """Unshuffle ``planes`` (rows, size, n_elements) uint8 into uint8 ``out`` (rows, size * n_elements)."""
    w = _word_size(size)
    n_rows, _, count = planes.shape
    if not out.flags.c_contiguous:  # a row body followed by trailing bytes: assemble, then copy
        body = np.empty((n_rows, size * count), np.uint8)
        _unshuffle_words(planes, body, size)
        out[...] = body
        return
    words = out.view(_WORDS[w]).reshape(n_rows, count, size // w)
    for j in range(size // w):
        word = words[:, :, j]
        group = planes[:, j * w : (j + 1) * w, :]
        if w < 8:
            _assemble(group, word)
        else:
            _assemble64(group, word)


#: elements per block of the 64-bit assembly: few enough ufunc calls per byte, and its two
#: 32-bit halves (thread-local scratch, 256 KiB each) stay in cache and are never faulted in again
_BLOCK64 = 1 << 16
_local = threading.local()


def _scratch(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two uint32 buffers of at least ``n`` elements, reused by this thread's later calls."""
    halves: tuple[np.ndarray | None, np.ndarray | None] = getattr(_local, "halves", (None, None))
    lo, hi = halves
    if lo is None or hi is None or lo.size < n:
        lo, hi = np.empty(n, np.uint32), np.empty(n, np.uint32)
        if n <= _BLOCK64:
            _local.halves = (lo, hi)
    return lo, hi


def _assemble64(planes: np.ndarray, word: np.ndarray) -> None:
    """``_assemble`` for 8 planes: two 32-bit halves, then one 64-bit shift and or (shifting
    uint64 words byte by byte is twice the work)."""
    n_rows, _, count = planes.shape
    step = max(1, min(count, _BLOCK64 // n_rows))
    lo_flat, hi_flat = _scratch(n_rows * step)
    for start in range(0, count, step):
        stop = min(start + step, count)
        block = word[:, start:stop]
        lo = lo_flat[: block.size].reshape(block.shape)
        hi = hi_flat[: block.size].reshape(block.shape)
        _assemble(planes[:, :4, start:stop], lo)
        _assemble(planes[:, 4:, start:stop], hi)
        np.copyto(block, hi, casting="unsafe")
        np.left_shift(block, 32, out=block)
        np.bitwise_or(block, lo, out=block, casting="unsafe")


def _shuffle(data: np.ndarray, size: int, inverse: bool) -> np.ndarray:
    return shuffle_rows(data.reshape(1, -1), size, inverse).reshape(-1)


#: largest element size accepted (bytes): far above any data type's, small enough to allocate
MAX_ELEMENT_SIZE = 2**16


@dataclass(frozen=True)
class ShuffleCodec(BytesBytesCodec):
    """Byte shuffle. ``element_size``: bytes per element, a positive integer, or None."""

    is_fixed_size = True
    element_size: int | None

    def __init__(self, *, element_size: int | None = None) -> None:
        if element_size is not None and (
            isinstance(element_size, bool)
            or not isinstance(element_size, int | np.integer)
            or not 1 <= element_size <= MAX_ELEMENT_SIZE
        ):
            raise OptionError("element_size", f"{element_size!r} is not allowed; expected an integer from 1 to {MAX_ELEMENT_SIZE}")
        object.__setattr__(self, "element_size", None if element_size is None else int(element_size))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        _, config = parse_named_configuration(data, "shuffle", require_configuration=False)
        config = config or {}
        unknown = set(config) - {"element_size"}
        if unknown:
            raise OptionError("shuffle", f"unknown configuration keys {sorted(unknown)}; allowed: ['element_size']")
        return cls(**config)  # type: ignore[arg-type]  # __init__ checks element_size

    def to_dict(self) -> dict[str, Any]:
        if self.element_size is None:
            return {"name": "shuffle"}
        return {"name": "shuffle", "configuration": {"element_size": self.element_size}}

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> Self:
        if self.element_size is None:
            return replace(self, element_size=array_spec.dtype.to_native_dtype().itemsize)
        return self

    def encode_bytes(self, data: np.ndarray) -> np.ndarray:
        """Shuffle 1-D uint8 ``data``; returns a new 1-D uint8 array of the same length."""
        return _shuffle(np.ascontiguousarray(data).view(np.uint8).ravel(), self.element_size or 1, False)

    def decode_bytes(self, data: np.ndarray) -> np.ndarray:
        """Undo ``encode_bytes``. Raises ChunkDecodeError naming the codec and current chunk."""
        try:
            return _shuffle(np.ascontiguousarray(data).view(np.uint8).ravel(), self.element_size or 1, True)
        except Exception as exc:  # noqa: BLE001 - numpy errors too
            from zopt.codecs.bounded import decode_error

            raise decode_error("shuffle", exc) from exc

    # synchronous methods: zarr 3.3+ and zopt's pipeline fast path run the chain without hops
    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return chunk_spec.prototype.buffer.from_array_like(self.encode_bytes(chunk_bytes.as_numpy_array()))

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return chunk_spec.prototype.buffer.from_array_like(self.decode_bytes(chunk_bytes.as_numpy_array()))

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._encode_sync(chunk_bytes, chunk_spec)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._decode_sync(chunk_bytes, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        return input_byte_length
