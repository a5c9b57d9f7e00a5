"""zstd through the library numcodecs bundles, with one compression context per thread.

``numcodecs.zstd.compress`` makes a new ``ZSTD_CCtx`` for every call and does it while holding
the GIL: ``ZSTD_createCCtx`` queries the CPU's features with ``cpuid``, which a virtual machine
traps (~15 µs a call here, half of the 38 µs that a 1 MiB compress holds the GIL for), and every
call allocates and frees the context's ~1 MiB workspace. Threads writing chunks in parallel then
queue for the GIL on every chunk (issue 34).

This module calls the same functions of the same library build — the ``ZSTD_*`` symbols that
numcodecs' ``zstd`` extension exports — through ``ctypes``, which releases the GIL for the whole
foreign call: ``ZSTD_compress2`` on a context made once per thread and level, and
``ZSTD_decompressDCtx`` on a context made once per thread. ``ZSTD_compress2`` resets the session
on every call and the parameters (level, checksum flag) are the ones numcodecs sets, so the
frames are the bytes ``numcodecs.zstd.compress`` writes; ``available()`` checks that on a probe
once per process and is False (callers then use numcodecs) when the symbols are missing, the
library is another version than numcodecs reports, or the bytes differ.

Contexts live as long as their thread (freed with its thread-local storage).

Batches (issue 34, part 2): after a call that touches a megabyte the interpreter's own data is out
of the CPU cache, so every return to Python costs ~10-20 µs of GIL. ``compress_rows`` compresses
the rows of a 2-D array into frames placed back to back in one buffer, a loop with nothing but the
foreign call in it (where zopt's compiled loops are available, ``zopt.compat.loops``, one foreign
call for all the rows: no Python between two frames); ``decompress_frames`` decodes the frames of
many chunks laid back to back with one foreign call (zstd decodes concatenated frames in one go),
after checking that each piece is exactly one frame declaring the chunk's size (which zstd then
enforces); ``read_frames`` reads, checks and decodes a batch's chunk files in one compiled call.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from zopt.compat import loops

__all__ = ["available", "compress", "compress_bound", "compress_rows", "decompress_frames", "decompress_into", "read_frames", "conditional_rows"]

_lock = threading.Lock()
_lib: Any = None  # the loaded library, False when unavailable, None before the first check
_local = threading.local()


def compress_bound(n: int) -> int:
    """``ZSTD_COMPRESSBOUND(n)`` (zstd.h): the most bytes one frame of ``n`` input bytes takes."""
    return n + (n >> 8) + (((128 << 10) - n) >> 11 if n < (128 << 10) else 0)


def _load() -> Any:
    import numcodecs.zstd as nz

    lib: Any = ctypes.CDLL(nz.__file__)  # already loaded by the import: dlopen returns the same handle
    size_t, vp, cvp = ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p
    for name, res, args in (
        ("ZSTD_versionNumber", ctypes.c_uint, []),
        ("ZSTD_createCCtx", vp, []),
        ("ZSTD_freeCCtx", size_t, [vp]),
        ("ZSTD_CCtx_setParameter", size_t, [vp, ctypes.c_int, ctypes.c_int]),
        ("ZSTD_compress2", size_t, [vp, vp, size_t, cvp, size_t]),
        ("ZSTD_createDCtx", vp, []),
        ("ZSTD_freeDCtx", size_t, [vp]),
        ("ZSTD_decompressDCtx", size_t, [vp, vp, size_t, cvp, size_t]),
        ("ZSTD_isError", ctypes.c_uint, [size_t]),
        ("ZSTD_getErrorName", ctypes.c_char_p, [size_t]),
        ("ZSTD_maxCLevel", ctypes.c_int, []),
        ("ZSTD_getFrameContentSize", ctypes.c_ulonglong, [cvp, size_t]),
        ("ZSTD_findFrameCompressedSize", size_t, [cvp, size_t]),
    ):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    if lib.ZSTD_versionNumber() != nz.VERSION_NUMBER:
        return False
    lib.max_level = lib.ZSTD_maxCLevel()
    # the batch loops' functions take addresses as size_t (the same registers as pointers):
    # ctypes converts a Python int to c_size_t about twice as fast as to c_void_p, which is
    # what runs between one chunk's compression and the next (issue 34)
    word = size_t if ctypes.sizeof(size_t) == ctypes.sizeof(vp) else vp
    lib.loop = {}
    # the frame-header checks read a few bytes: they keep the GIL (PYFUNCTYPE) rather than
    # release and retake it around a call of a microsecond
    for name, res, n, proto in (("ZSTD_compress2", size_t, 5, ctypes.CFUNCTYPE),
                                ("ZSTD_getFrameContentSize", ctypes.c_ulonglong, 2, ctypes.PYFUNCTYPE),
                                ("ZSTD_findFrameCompressedSize", size_t, 2, ctypes.PYFUNCTYPE)):
        lib.loop[name] = proto(res, *[word] * n)((name, lib))
    # the same functions for the compiled loops (zopt.compat.loops), by address
    lib.address = {name: loops.function_address(getattr(lib, name)) for name in (*lib.loop, "ZSTD_decompressDCtx")}
    return lib


def available() -> bool:
    """True when this module's frames are numcodecs' (checked once per process on a probe).

    The library is loaded and probed on a local, under a lock, and published once, checked: no
    thread sees it before its probe has passed (then every thread sees the same answer)."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                try:
                    lib = _load()
                except (ImportError, OSError, AttributeError, ValueError):  # ValueError: a null function pointer
                    lib = False
                _lib = lib if lib and _same_as_numcodecs(lib) else False
    return bool(_lib)


def _same_as_numcodecs(lib: ctypes.CDLL) -> bool:
    """Whether ``lib`` writes numcodecs' bytes (a probe, two levels); runs before ``lib`` is published."""
    import numcodecs.zstd as nz

    probe = np.frombuffer(bytes(range(256)) * 64 + b"zopt" * 1000, dtype=np.uint8)
    try:
        return all(
            _compress(lib, probe, level, checksum).tobytes() == nz.compress(probe, level, checksum)
            for level, checksum in ((3, False), (1, True))
        )
    except Exception:  # noqa: BLE001 - any failure means: use numcodecs
        return False


class _Context:
    """A ``ZSTD_CCtx`` or ``ZSTD_DCtx`` freed with the thread-local storage that holds it."""

    def __init__(self, lib: ctypes.CDLL, compress: bool) -> None:
        self.lib, self.compress = lib, compress
        self.ptr = lib.ZSTD_createCCtx() if compress else lib.ZSTD_createDCtx()
        if not self.ptr:
            raise MemoryError("zstd: cannot create a context")

    def __del__(self) -> None:
        if self.ptr:
            (self.lib.ZSTD_freeCCtx if self.compress else self.lib.ZSTD_freeDCtx)(self.ptr)
            self.ptr = None


def _check(lib: ctypes.CDLL, code: int, what: str) -> int:
    if lib.ZSTD_isError(code):
        raise RuntimeError(f"zstd {what} error: {lib.ZSTD_getErrorName(code).decode()}")
    return code


def _cctx(level: int, checksum: bool, lib: ctypes.CDLL | None = None) -> int:
    """This thread's compression context for ``level`` and ``checksum`` (of ``lib``; None: the published library)."""
    lib = _lib if lib is None else lib
    contexts = getattr(_local, "cctx", None)
    if contexts is None or contexts.get("lib") is not lib:
        contexts = _local.cctx = {"lib": lib}
    ctx = contexts.get((level, checksum))
    if ctx is None:
        ctx = _Context(lib, True)
        # what numcodecs.zstd.compress sets: the level (capped at the maximum), the checksum flag
        _check(lib, lib.ZSTD_CCtx_setParameter(ctx.ptr, 100, min(level, int(lib.max_level))), "level")  # ZSTD_c_compressionLevel
        _check(lib, lib.ZSTD_CCtx_setParameter(ctx.ptr, 201, 1 if checksum else 0), "checksum")  # ZSTD_c_checksumFlag
        contexts[(level, checksum)] = ctx
    return ctx.ptr


_address = loops.address  # checked: contiguous, large enough, writable where written


def compress(data: np.ndarray, level: int, checksum: bool = False, head: int = 0) -> np.ndarray:
    """One zstd frame of ``data`` (1-D C-contiguous uint8): the bytes of
    ``numcodecs.zstd.compress(data, level, checksum)``, as a 1-D uint8 array of ``head`` bytes
    left for the caller (uninitialised) followed by the frame. The GIL is released while zstd
    runs. Call only after ``available()`` returned True. Raises RuntimeError on a zstd error.
    """
    return _compress(_lib, data, level, checksum, head)


def _compress(lib: ctypes.CDLL, data: np.ndarray, level: int, checksum: bool, head: int = 0) -> np.ndarray:
    n = data.size
    cap = compress_bound(n)
    out = np.empty(head + cap, dtype=np.uint8)
    size = lib.ZSTD_compress2(_cctx(level, checksum, lib), _address(out, head + cap, writable=True) + head, cap,
                              _address(data, data.nbytes) if n else None, n)
    if size > cap:  # zstd's error codes are the largest size_t values
        _check(lib, size, "compression")
    out.resize(head + size, refcheck=False)  # realloc: shrinks in place, no copy
    return out


def decompress_into(blob: bytes | bytearray | memoryview | np.ndarray, out: np.ndarray, nbytes: int | None = None) -> int:
    """Decode the zstd frame(s) in ``blob`` (bytes-like or 1-D uint8) into ``out`` (C-contiguous,
    writable); returns the number of bytes decoded. ``nbytes``: the decoded size required
    (ValueError otherwise). The GIL is released while zstd runs. Raises RuntimeError for bytes
    zstd cannot decode into ``out`` (corrupt, or more than ``out`` holds).
    """
    lib = _lib
    src: bytes | int | None
    if isinstance(blob, bytes):  # ctypes passes a bytes object's own buffer
        src, size = blob, len(blob)
    else:
        arr = blob if isinstance(blob, np.ndarray) else np.frombuffer(blob, dtype=np.uint8)
        src, size = (_address(arr) if arr.nbytes else None), arr.nbytes
    got = lib.ZSTD_decompressDCtx(_dctx(), _address(out, writable=True), out.nbytes, src, size)
    if got > out.nbytes:
        _check(lib, got, "decompression")
    if nbytes is not None and got != nbytes:
        raise ValueError(f"zstd frame holds {got} bytes of content, expected {nbytes}")
    return got


def compress_rows(rows: np.ndarray, level: int, checksum: bool = False, head: int = 0, shuffle: int = 1
                  ) -> tuple[np.ndarray, np.ndarray]:
    """One zstd frame per row of ``rows`` (2-D C-contiguous uint8 ``(n, width)``), each the bytes
    of ``numcodecs.zstd.compress(row, level, checksum)``, back to back in one 1-D uint8 array and
    each preceded by ``head`` bytes left for the caller (uninitialised). Returns ``(data, ends)``:
    chunk ``k`` (head and frame) is ``data[ends[k - 1]:ends[k]]`` (``ends[-1]`` is 0), ``ends``
    int64 ``(n,)``. The GIL is released for each frame. Call only after ``available()`` returned
    True. ``shuffle`` > 1: each row is byte-shuffled with that element size first
    (``zopt.codecs.shuffle.shuffle_rows``' bytes), one row at a time; only where the compiled
    loops are available (else ValueError). Raises RuntimeError on a zstd error.
    """
    if not rows.flags.c_contiguous:  # the loop walks the rows by address
        rows = np.ascontiguousarray(rows)
    fused = loops.available()
    if shuffle > 1 and not fused:
        raise ValueError("compress_rows: shuffle needs zopt's compiled loops (zopt.compat.loops.available())")
    n, width = rows.shape
    cap = compress_bound(width)
    out = np.empty(n * (head + cap), dtype=np.uint8)
    lib = _lib
    ctx = _cctx(level, checksum)
    if fused:  # one foreign call for all the rows
        failed, frame_ends = loops.zstd_rows(lib.address["ZSTD_compress2"], ctx, rows, out, cap, head, shuffle)
        if failed >= 0:
            _check(lib, int(frame_ends[failed]), "compression")
            raise RuntimeError("zstd compression error: a frame larger than its bound")
        end = int(frame_ends[-1]) if n else 0
        out.resize(end, refcheck=False)
        return out, frame_ends
    fn = lib.loop["ZSTD_compress2"]
    dst, src = _address(out, n * (head + cap), writable=True) + head, _address(rows) if rows.size else 0
    ends: list[int] = []
    append = ends.append
    off = 0
    for _ in range(n):  # nothing else in this loop: Python runs cold after each frame
        size = fn(ctx, dst + off, cap, src, width)
        if size > cap:
            _check(lib, size, "compression")
        off += size + head
        append(off)
        src += width
    out.resize(off, refcheck=False)  # realloc: shrinks in place
    return out, np.array(ends, dtype=np.int64)


def _dctx() -> int:
    ctx = getattr(_local, "dctx", None)
    if ctx is None:
        ctx = _local.dctx = _Context(_lib, False)
    return int(ctx.ptr)


def read_frames(paths: list[str], blob: np.ndarray, cap: int, out: np.ndarray, nbytes: int) -> np.ndarray | None:
    """``zopt.compat.loops.read_zstd`` with this library's functions and this thread's context:
    the files ``paths`` read and each decoded (exactly one frame of ``nbytes``) into ``out``'s
    rows. Call only after ``available()`` and ``loops.available()`` returned True."""
    address = _lib.address
    functions = (address["ZSTD_getFrameContentSize"], address["ZSTD_findFrameCompressedSize"],
                 address["ZSTD_decompressDCtx"])
    return loops.read_zstd(paths, blob, cap, functions, _dctx(), out, nbytes)


def conditional_rows(rows: np.ndarray, level: int, checksum: bool, shuffle: int, zbit: int,
                     windows: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``zopt.compat.loops.zstd_conditional`` with this thread's context: ``(data, ends, masks)``
    of every row (``[mask byte][frame or bytes]``, back to back), or None on a tie (a frame
    exactly a row's size). Call only after ``available()`` and ``loops.available()`` returned
    True. Raises RuntimeError on a zstd error."""
    if not rows.flags.c_contiguous:
        rows = np.ascontiguousarray(rows)
    n, width = rows.shape
    cap = compress_bound(width)
    out = np.empty(n * (1 + cap), dtype=np.uint8)
    s = sum(length for _, length in windows) if shuffle else 0
    failed, ends, masks = loops.zstd_conditional((_lib.address["ZSTD_compress2"], _cctx(level, checksum)), rows, out,
                                                 cap, shuffle, zbit, windows, compress_bound(s))
    if failed == -2:
        return None
    if failed >= 0:
        _check(_lib, int(ends[failed]), "compression")
        raise RuntimeError("zstd compression error: a frame larger than its bound")
    out.resize(int(ends[-1]) if n else 0, refcheck=False)
    return out, ends, masks


def decompress_frames(blob: np.ndarray, ends: np.ndarray, out: np.ndarray, nbytes: int) -> bool:
    """Decode ``len(ends)`` zstd frames laid back to back in ``blob`` (1-D uint8; frame ``k`` is
    ``blob[ends[k - 1]:ends[k]]``) into ``out`` (C-contiguous, writable, ``len(ends) * nbytes``
    bytes) with one call that releases the GIL. Returns False, leaving ``out`` undefined, unless
    every piece is exactly one frame declaring ``nbytes`` bytes of content and all of them decode;
    the caller then decodes chunk by chunk to name the one at fault.
    """
    lib = _lib
    n = len(ends)
    if n == 0 or out.nbytes != n * nbytes:
        return n == 0
    base = _address(blob, int(ends[-1]))
    content, frame = lib.loop["ZSTD_getFrameContentSize"], lib.loop["ZSTD_findFrameCompressedSize"]
    start = 0
    for end in ends.tolist():
        if content(base + start, end - start) != nbytes or frame(base + start, end - start) != end - start:
            return False
        start = end
    # zstd checks each frame's decoded size against the size its header declares
    got = lib.ZSTD_decompressDCtx(_dctx(), _address(out, n * nbytes, writable=True), out.nbytes, base, start)
    return got == out.nbytes
