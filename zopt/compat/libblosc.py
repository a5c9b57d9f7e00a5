"""Blosc compression through the c-blosc numcodecs bundles, many chunks per Python call site.

``numcodecs.blosc.compress`` holds the GIL ~60 µs for each 1 MiB chunk on this machine (issue 34):
its checks, a ``bytes`` object of the chunk's size and, after the call that released the GIL,
Python running with its data out of the CPU cache. This module calls ``blosc_compress_ctx`` — the
function numcodecs calls outside the main thread, with the same arguments (``numinternalthreads``
1) — of the same library build, the ``blosc_*`` symbols numcodecs' ``blosc`` extension exports,
through ``ctypes``, which releases the GIL for the whole foreign call, in a loop writing the
frames back to back into one buffer — or, where zopt's compiled loops are available
(``zopt.compat.loops``), in one foreign call for all the rows.

``compressor(...)`` gives the function for one configuration, or None (callers then use
numcodecs) when the symbols are missing or its bytes differ from ``numcodecs.blosc.compress`` on
a probe (checked once per configuration and process).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from zopt.compat import loops

__all__ = ["MAX_OVERHEAD", "compressor"]

MAX_OVERHEAD = 16  # BLOSC_MAX_OVERHEAD (blosc.h): a chunk never takes more than this beyond its bytes
_lock = threading.Lock()
_lib: Any = None  # the loaded library, False when unavailable, None before the first try

#: ``f(rows, head) -> (data, ends)``: see ``compressor``
RowsCompressor = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def _load() -> Any:
    global _lib
    with _lock:
        if _lib is None:
            try:
                from numcodecs import blosc

                lib: Any = ctypes.CDLL(blosc.__file__)  # loaded by the import already: the same handle
                size_t = ctypes.c_size_t
                # addresses passed as size_t (the same registers as pointers): ctypes converts a
                # Python int to it about twice as fast as to c_void_p (issue 34)
                word = size_t if ctypes.sizeof(size_t) == ctypes.sizeof(ctypes.c_void_p) else ctypes.c_void_p
                lib.compress_ctx = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int, size_t, size_t, word, word,
                                                    size_t, ctypes.c_char_p, size_t, ctypes.c_int)(("blosc_compress_ctx", lib))
                _lib = lib
            except (ImportError, OSError, AttributeError):
                _lib = False
    return _lib




@functools.lru_cache(maxsize=64)
def compressor(cname: str, clevel: int, shuffle: int, typesize: int, blocksize: int) -> RowsCompressor | None:
    """The rows compressor of one numcodecs ``Blosc`` configuration (``shuffle`` 0, 1 or 2, as
    numcodecs resolves it; ``typesize`` in bytes), or None when this module cannot write
    numcodecs' bytes for it.

    The function takes ``rows`` (2-D C-contiguous uint8 ``(n, width)``) and ``head`` and returns
    ``(data, ends)``: one blosc chunk per row, each the bytes of
    ``numcodecs.blosc.compress(row, cname, clevel, shuffle, blocksize, typesize)``, back to back
    in one 1-D uint8 array, each after ``head`` bytes left for the caller; chunk ``k`` is
    ``data[ends[k - 1]:ends[k]]``. It raises RuntimeError where blosc reports an error.
    """
    lib = _load()
    if not lib or shuffle not in (0, 1, 2) or typesize < 1:
        return None
    fn = lib.compress_ctx
    name = cname.encode("ascii")
    try:
        settings = loops.Blosc(loops.function_address(lib.blosc_compress_ctx), clevel, shuffle, typesize, name, blocksize)
    except ValueError:  # a null function pointer: numcodecs' compressor is used instead
        return None

    def compress(rows: np.ndarray, head: int = 0) -> tuple[np.ndarray, np.ndarray]:
        if not rows.flags.c_contiguous:  # the loop walks the rows by address
            rows = np.ascontiguousarray(rows)
        n, width = rows.shape
        cap = width + MAX_OVERHEAD
        out = np.empty(n * (head + cap), dtype=np.uint8)
        if loops.available():  # one foreign call for all the rows
            failed, chunk_ends = loops.blosc_rows(settings, rows, out, cap, head)
            if failed >= 0:
                raise RuntimeError(f"error during blosc compression: {int(chunk_ends[failed])}")
            out.resize(int(chunk_ends[-1]) if n else 0, refcheck=False)
            return out, chunk_ends
        dst, src = loops.address(out, n * (head + cap), writable=True) + head, loops.address(rows)
        ends: list[int] = []
        append = ends.append
        off = 0
        for _ in range(n):  # nothing else in this loop: Python runs cold after each chunk
            size = fn(clevel, shuffle, typesize, width, src, dst + off, cap, name, blocksize, 1)
            if size <= 0:
                raise RuntimeError(f"error during blosc compression: {size}")
            off += size + head
            append(off)
            src += width
        out.resize(off, refcheck=False)
        return out, np.array(ends, dtype=np.int64)

    try:
        from numcodecs import blosc

        rng = np.random.default_rng(34)
        probe = np.concatenate([np.cumsum(rng.integers(-3, 4, 6000)).astype("<i4").view(np.uint8),
                                rng.integers(0, 256, 3001, dtype=np.uint8), np.zeros(4096, np.uint8)])
        rows = np.stack([probe, probe[::-1].copy()])
        data, ends = compress(rows, 0)
        expected: list[bytes] = []
        # outside the main thread numcodecs compresses with one thread (``blosc_compress_ctx``), as
        # in a job's worker threads; in the main thread it uses blosc's global context and its
        # threads, whose bytes vary from call to call (blocks land in the order they finish)
        probe_thread = threading.Thread(target=lambda: expected.extend(
            blosc.compress(r, name, clevel, shuffle, blocksize, typesize) for r in rows))
        probe_thread.start()
        probe_thread.join()
        if data.tobytes() != b"".join(expected) or ends.tolist() != [len(expected[0]), len(expected[0]) + len(expected[1])]:
            return None
    except Exception:  # noqa: BLE001 - any failure means: use numcodecs
        return None
    return compress
