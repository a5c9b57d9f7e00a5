"""A batch's per-chunk loops in one foreign call: ``zopt/compat/_loops.c`` (issue 34, G3).

Between two chunks' foreign calls (a file's ``open``/``read``/``close``, a chunk's compression)
the interpreter holds the GIL ~10-25 µs, cold after the chunk's megabyte of work; 16 threads
doing that ask for more of the GIL than there is. The loops of ``_loops.c`` make those calls for a
whole batch of chunks in one call, during which ctypes has released the GIL.

The library is compiled when zopt is installed (``hatch_build.py``: the C compiler of the
platform, no Python headers, no library linked: the compressors are called through the function
pointers of the libraries numcodecs loaded, so the bytes are numcodecs' own). Where it could not
be built, ``available()`` is False and the callers run the same loops in Python, byte for byte
the same output; ``ZOPT_NO_LOOPS=1`` forces that (tests run both); ``ZOPT_LOOPS_LIBRARY`` names another build of
the library to load instead (the sanitizer test's). The library is looked for
beside this file, then in zopt's installed distribution (a source checkout on ``sys.path`` in
front of the installed package), and used only if its ABI version is this module's ``VERSION``.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from zopt.errors import ZoptError

if TYPE_CHECKING:
    from _ctypes import CFuncPtr

__all__ = ["Blosc", "FileRefused", "address", "available", "blosc_rows", "read_files", "read_zstd", "zstd_conditional", "zstd_rows"]

VERSION = 6
_PATH = Path(__file__).with_name("_loops.so.1")
_lib: ctypes.CDLL | None | bool = None
_lock = threading.Lock()
_i64 = ctypes.c_int64
_word = ctypes.c_size_t if ctypes.sizeof(ctypes.c_size_t) == ctypes.sizeof(ctypes.c_void_p) else ctypes.c_void_p


def _paths() -> list[Path]:
    """Where the library may be: beside this file (an install, or an editable one), then in the
    installed distribution of zopt (this module imported from a source tree that shadows the
    installed package, as ``python -m pytest`` in a checkout does)."""
    paths = [_PATH]
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        dist = distribution("zopt")
        paths += [Path(str(dist.locate_file(f))) for f in dist.files or () if f.name == _PATH.name]
    except (PackageNotFoundError, OSError):  # zopt not installed: only the file beside this one
        pass
    return [p for p in paths if p.is_file()]


def _load() -> ctypes.CDLL | bool:
    if os.environ.get("ZOPT_NO_LOOPS"):
        return False
    chosen = os.environ.get("ZOPT_LOOPS_LIBRARY")  # a build of _loops.c to use instead (e.g. with sanitizers)
    for path in [Path(chosen)] if chosen else _paths():  # the first of this ABI version
        lib = _open(path)
        if lib:
            return lib
    return False


def _open(path: Path) -> ctypes.CDLL | bool:
    try:
        lib = ctypes.CDLL(str(path))
        lib.zopt_loops_version.restype = _i64
        if lib.zopt_loops_version() != VERSION:
            return False
        w = _word
        for name, args in (
            ("zopt_read_files", [w, _i64, w, _i64, _i64, _i64, w]),
            ("zopt_read_zstd", [w, _i64, w, _i64, _i64, w, w, w, w, w, w, ctypes.c_uint64]),
            ("zopt_zstd_rows", [w, w, w, _i64, _i64, w, _i64, _i64, w, _i64, w]),
            ("zopt_zstd_conditional", [w, w, w, _i64, _i64, w, _i64, _i64, _i64, w, w, _i64, w, w, _i64, w, w]),
            ("zopt_blosc_rows", [w, ctypes.c_int, ctypes.c_int, _i64, w, _i64, _i64, w, _i64, ctypes.c_char_p, _i64,
                                 _i64, w]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = _i64, args
    except (OSError, AttributeError):
        return False
    return lib


def _library() -> ctypes.CDLL | None:
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = _load()
    return _lib if isinstance(_lib, ctypes.CDLL) else None


def available() -> bool:
    """True when the compiled loops are loaded (not with ``ZOPT_NO_LOOPS`` set)."""
    return _library() is not None


def function_address(fn: CFuncPtr) -> int:
    """The address of a ctypes foreign function (``CDLL(...).name``), for the loops' function pointers."""
    address = ctypes.cast(fn, ctypes.c_void_p).value
    if not address:
        raise ValueError("function_address: a null function pointer")
    return int(address)


def address(a: np.ndarray, nbytes: int = 0, writable: bool = False) -> int:
    """The address of ``a``'s first byte for a foreign call that reads (or, ``writable``,
    writes) at least ``nbytes`` bytes of it from there: the one way zopt's ctypes wrappers
    (this module, ``libzstd``, ``libblosc``) pass an array.

    Raises ValueError (naming what is wrong) for an array that is not C-contiguous, smaller than
    ``nbytes`` or, ``writable``, read-only: the call would read or write past it, or into memory
    that is not the array's.
    """
    if not a.flags.c_contiguous:
        raise ValueError(f"zopt.compat.loops: a C-contiguous array is needed, got strides {a.strides}")
    if a.nbytes < nbytes:
        raise ValueError(f"zopt.compat.loops: an array of at least {nbytes} bytes is needed, got {a.nbytes}")
    if writable and not a.flags.writeable:
        raise ValueError("zopt.compat.loops: a writable array is needed, got a read-only one")
    if a.flags.writeable and a.nbytes:  # through ctypes' buffer export: 4x faster than a.ctypes (issue 34)
        return ctypes.addressof(ctypes.c_char.from_buffer(a.data))
    return int(a.ctypes.data)


_address = address


class FileRefused(ZoptError, OSError):
    """A file the reading loops refused: ``path``, ``index`` (its position in the batch) and
    ``why`` (not a regular file, or its size changed while it was read)."""

    def __init__(self, path: str, index: int, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.index, self.why = path, index, why


_KIND = 1 << 16  # _loops.c's ZOPT_KIND


def _why(code: int) -> str:
    import stat

    mode = code - _KIND
    if mode == stat.S_IFREG:
        return "the file changed size while it was read (rewritten under the job?)"
    kinds = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
             stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}
    return f"not a regular file ({kinds.get(mode, f'of type {mode:o}')}): refused before any read"


def read_files(paths: Sequence[str], buf: np.ndarray, stride: int, cap: int) -> np.ndarray:
    """Read the files ``paths`` whole into ``buf`` (writable 1-D uint8): file ``k`` at byte
    ``k * stride``, or with ``stride`` 0 right after the bytes stored of the file before it; at
    most ``cap`` bytes of each are stored (``buf`` must hold them all). Each file is opened
    without waiting and refused unless it is a regular file; one longer than ``cap`` is not read.

    Returns int64 ``(n,)``: the bytes stored of each file, ``cap + 1`` for a file longer than
    ``cap``, ``-errno.ENOENT`` for a file that does not exist. Raises FileRefused for a file that
    is not a regular one or whose size changed while it was read, OSError naming the file for any
    other error. Call only after ``available()`` returned True.
    """
    room = len(paths) * (stride or cap)
    return _read(paths, "zopt_read_files",
                 lambda names, sizes: (_address(buf, room, writable=True), stride, cap, room, sizes))[1]


def _read(paths: Sequence[str], function: str, arguments: Callable[[int, int], tuple[int, ...]]) -> tuple[int, np.ndarray]:
    """Call the reading loop ``function`` on ``paths`` with ``(names, n, *arguments(names, sizes))``
    (the addresses of the paths' array and of the sizes' array); returns its status and the sizes.
    Raises FileRefused or OSError naming the file it failed on."""
    lib = _library()
    assert lib is not None
    n = len(paths)
    sizes = np.empty(n, dtype=np.int64)
    if n == 0:
        return -1, sizes
    names = (ctypes.c_char_p * n)(*map(os.fsencode, paths))
    failed = int(getattr(lib, function)(ctypes.addressof(names), n, *arguments(ctypes.addressof(names), _address(sizes))))
    if failed >= 0:
        code = -int(sizes[failed])
        if code >= _KIND:
            raise FileRefused(paths[failed], failed, _why(code))
        raise OSError(code, os.strerror(code), paths[failed])
    return failed, sizes


def read_zstd(paths: Sequence[str], blob: np.ndarray, cap: int, functions: tuple[int, int, int], dctx: int,
              out: np.ndarray, nbytes: int) -> np.ndarray | None:
    """``read_files(paths, blob, 0, cap)`` with the files back to back in ``blob`` (as many as fit
    in it), then each file, which must be exactly one zstd frame declaring ``nbytes`` of content,
    decoded into ``out`` (C-contiguous, writable, ``len(paths) * nbytes`` bytes; file ``k`` to
    bytes ``[k * nbytes, (k + 1) * nbytes)``, a missing file's left as they are). ``functions``:
    the addresses of libzstd's ``ZSTD_getFrameContentSize``, ``ZSTD_findFrameCompressedSize`` and
    ``ZSTD_decompressDCtx``; ``dctx`` a decompression context.

    Returns the sizes as ``read_files`` does, or None when a file is not one frame of ``nbytes``
    that decodes, is longer than ``cap``, or the files do not fit in ``blob`` (the caller then
    reads the chunks one by one, naming the one at fault). Raises FileRefused or OSError naming
    the file as ``read_files``.
    """
    room = blob.nbytes
    failed, sizes = _read(paths, "zopt_read_zstd",
                          lambda names, sizes: (_address(blob, writable=True), cap, room, sizes, *functions, dctx,
                                                _address(out, len(paths) * nbytes, writable=True), nbytes))
    return sizes if failed == -1 else None


_local = threading.local()


def _scratch(nbytes: int) -> np.ndarray:
    """This thread's scratch row of at least ``nbytes`` (reused: no page faults from chunk to chunk)."""
    buf = getattr(_local, "scratch", None)
    if buf is None or buf.size < nbytes:
        buf = _local.scratch = np.empty(max(nbytes, 1), dtype=np.uint8)
    return buf


def zstd_rows(compress2: int, ctx: int, rows: np.ndarray, out: np.ndarray, cap: int, head: int, shuffle: int = 1
              ) -> tuple[int, np.ndarray]:
    """Each row of ``rows`` (2-D C-contiguous uint8 ``(n, width)``) compressed with libzstd's
    ``ZSTD_compress2`` (its address) on context ``ctx``, into ``out`` back to back, each after
    ``head`` bytes; ``cap``: room for one frame. ``shuffle`` > 1: each row byte-shuffled first
    with that element size, as ``zopt.codecs.shuffle.shuffle_rows`` does. Returns ``(-1, ends)`` (int64 ``(n,)``: each
    chunk's end in ``out``), or ``(k, ends)`` when row ``k`` failed with zstd's code ``ends[k]``."""
    lib = _library()
    assert lib is not None
    n, width = rows.shape
    ends = np.empty(n, dtype=np.int64)
    scratch = _scratch(width) if shuffle > 1 else None
    failed = lib.zopt_zstd_rows(compress2, ctx, _address(rows) if rows.size else 0, n, width,
                                _address(out, n * (head + cap), writable=True), cap, head, _address(ends), shuffle,
                                0 if scratch is None else _address(scratch, width, writable=True))
    return int(failed), ends


class Blosc(NamedTuple):
    """c-blosc's ``blosc_compress_ctx`` (its address) and numcodecs' arguments for it."""

    compress_ctx: int
    clevel: int
    shuffle: int
    typesize: int
    cname: bytes
    blocksize: int


def blosc_rows(blosc: Blosc, rows: np.ndarray, out: np.ndarray, cap: int, head: int) -> tuple[int, np.ndarray]:
    """``zstd_rows`` for c-blosc's ``blosc_compress_ctx`` with numcodecs' arguments (one thread);
    a failed row's ``ends[k]`` is blosc's return value."""
    lib = _library()
    assert lib is not None
    n, width = rows.shape
    ends = np.empty(n, dtype=np.int64)
    failed = lib.zopt_blosc_rows(blosc.compress_ctx, blosc.clevel, blosc.shuffle, blosc.typesize,
                                 _address(rows) if rows.size else 0, n, width,
                                 _address(out, n * (head + cap), writable=True), cap, blosc.cname,
                                 blosc.blocksize, head, _address(ends))
    return int(failed), ends


def zstd_conditional(zstd: tuple[int, int], rows: np.ndarray, out: np.ndarray, cap: int, shuffle: int, zbit: int,
                     windows: Sequence[tuple[int, int]], trial_cap: int) -> tuple[int, np.ndarray, np.ndarray]:
    """``conditional([shuffle, zstd])`` (``shuffle``: the element size) or ``conditional([zstd])``
    (``shuffle`` 0) with ``compress_if_smaller`` and a one-byte header, every row of ``rows``
    (2-D C-contiguous uint8 ``(n, width)``) into ``out`` (``n * (1 + cap)`` bytes) in one foreign
    call: the shuffle judged on the sample ``windows`` (``(start, length)`` in bytes), as
    ``zopt.codecs.batch._Conditional`` does. ``zstd``: the address of libzstd's
    ``ZSTD_compress2`` and a compression context. ``zbit``: the mask bit of zstd; ``trial_cap``: room
    for the frame of one sample. Returns ``(status, ends, masks)``: status -1, -2 for a tie (a
    frame exactly ``width`` bytes: encode the batch another way), or ``k`` for a row zstd failed on
    (its code in ``ends[k]``).
    """
    lib = _library()
    assert lib is not None
    n, width = rows.shape
    ends, masks = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    spans = np.array(windows if shuffle else [], dtype=np.int64).reshape(-1, 2)
    starts, lengths = np.ascontiguousarray(spans[:, 0]), np.ascontiguousarray(spans[:, 1])
    s = int(lengths.sum())
    scratch = _scratch(width + 2 * s + trial_cap)
    trial = scratch[width + 2 * s :]
    failed = lib.zopt_zstd_conditional(*zstd, _address(rows) if rows.size else 0, n, width,
                                       _address(out, n * (1 + cap), writable=True),
                                       cap, shuffle, zbit, _address(starts), _address(lengths), len(spans),
                                       _address(scratch), _address(trial), trial_cap, _address(ends), _address(masks))
    return int(failed), ends, masks
