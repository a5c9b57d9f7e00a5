"""Opening and reading one chunk (or shard) file of a source, whatever the file under its name is.

A source directory may hold anything under a chunk's name: a FIFO (an ``open`` for reading waits
for a writer forever), a character device (``/dev/zero`` never ends, ``/dev/ptmx`` blocks), a
socket, a directory, a sparse file of 64 GiB. Every read of a chunk file in zopt therefore:

- opens with ``O_NONBLOCK`` (and ``O_NOCTTY``), so that the ``open`` itself never waits, then
  ``fstat``s the descriptor and refuses anything but a regular file before any read, naming the
  chunk (``zopt/compat/_loops.c`` does the same for the batches it reads);
- refuses a file larger than the chunk's bound (``bound``: the most bytes one encoded chunk of the
  array's chain takes, plus headroom) by its size, before anything is allocated;
- reads the file in a loop (``os.readv`` returns at most ~2 GiB per call, and less whenever it
  likes; ``EINTR`` is retried by Python, PEP 475) and refuses a file whose size changed while it
  was read (fewer bytes than ``fstat`` said, or more).

Every refusal is a ``ChunkDecodeError`` (a ``ZoptError``) naming the chunk key and the store.
"""

from __future__ import annotations

import errno
import os
import stat

import numpy as np

from zopt.errors import ChunkDecodeError

__all__ = ["CHANGED", "FLAGS", "KINDS", "check_file", "kind_of", "open_regular", "pread_into", "read_chunk_file", "read_into",
           "refused", "too_large"]

#: how a chunk file is opened: never waits in ``open`` (a FIFO without a writer, a terminal device)
FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)

#: what a file that is not a regular one is called in the messages, by ``st_mode & S_IFMT``
KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symbolic link"}

#: the reason given for a file whose size changed while it was read
CHANGED = "the file changed size while it was read (rewritten under the job?)"

#: the most bytes one ``readv`` is asked for (Linux returns at most 0x7ffff000 per call)
_STEP = 1 << 30


def kind_of(mode: int) -> str:
    """The name of the file type of ``st_mode`` (``mode & S_IFMT`` also accepted)."""
    return KINDS.get(stat.S_IFMT(mode), f"a file of type {stat.S_IFMT(mode):o}")


def refused(key: str | None, why: str, store: str | None = None, inner: tuple[int, ...] | None = None) -> ChunkDecodeError:
    """The error for a chunk file refused for ``why``, naming ``key`` (and ``store``)."""
    return ChunkDecodeError(key, inner, why, store=store)


def _not_regular(kind: str) -> str:
    return f"not a regular file ({kind}): refused before any read"


def open_regular(path: str | os.PathLike[str], key: str | None, store: str | None = None,
                 inner: tuple[int, ...] | None = None) -> tuple[int, os.stat_result]:
    """``(fd, stat)`` of the regular file ``path``, opened for reading without waiting.

    Raises FileNotFoundError when there is no file (an absent chunk, for the caller to decide);
    ChunkDecodeError naming ``key`` when it is not a regular file; OSError (with the path) for
    another error of ``open`` (e.g. permission denied).
    """
    try:
        fd = os.open(path, FLAGS)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket (or a FIFO on a system that refuses it without a writer)
            raise refused(key, _not_regular("a socket or a FIFO"), store, inner) from exc
        raise
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise refused(key, _not_regular(kind_of(st.st_mode)), store, inner)
    return fd, st


def too_large(size: int, bound: int) -> str:
    """The reason given for a chunk file of ``size`` bytes over its ``bound``."""
    return f"{size} bytes, more than the {bound} bytes one encoded chunk of this chain can take (refused by its size)"


def read_into(fd: int, out: np.ndarray) -> int:
    """Read ``fd`` from its position into ``out`` (1-D uint8, contiguous) until ``out`` is full or
    the file ends; returns the bytes read. A loop: one ``readv`` returns less than asked at the
    end of the file, past ~2 GiB, or when a signal came."""
    view = memoryview(out.data).cast("B") if out.size else memoryview(b"")
    got = 0
    while got < out.size:
        n = os.readv(fd, [view[got : got + _STEP]])
        if n == 0:
            break
        got += n
    return got


def pread_into(fd: int, out: np.ndarray, offset: int) -> int:
    """Read ``fd`` at ``offset`` into ``out`` (contiguous) until it is full or the file ends
    (positional reads in a loop, as ``read_into``); returns the bytes read."""
    view = memoryview(out.reshape(-1).view(np.uint8).data) if out.size else memoryview(b"")
    got = 0
    while got < view.nbytes:
        n = os.preadv(fd, [view[got : got + _STEP]], offset + got)
        if n == 0:
            break
        got += n
    return got


def read_chunk_file(path: str | os.PathLike[str], bound: int, key: str | None, store: str | None = None,
                    inner: tuple[int, ...] | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """The bytes of the chunk file ``path`` (1-D uint8), read whole (see the module docstring).

    bound : the most bytes the file may hold; a larger file is refused by its size, unread.
    out : where to read (1-D uint8 of at least ``size + 1`` bytes; a new array when None or too small).
    Raises FileNotFoundError for a missing file; ChunkDecodeError naming ``key`` for a file that is
    not a regular one, larger than ``bound``, or whose size changed while it was read.
    """
    fd, st = open_regular(path, key, store, inner)
    try:
        size = st.st_size
        if size > bound:
            raise refused(key, too_large(size, bound), store, inner)
        if out is None or out.size < size + 1:
            out = np.empty(size + 1, dtype=np.uint8)
        got = read_into(fd, out[: size + 1])  # one byte more tells a file that grew
    finally:
        os.close(fd)
    if got != size:
        raise refused(key, f"{CHANGED}: {size} bytes, then {got}{' or more' if got > size else ''}", store, inner)
    return out[:size]


def check_file(path: str | os.PathLike[str], bound: int | None, key: str | None, store: str | None = None) -> bool:
    """Check, before a reader that blocks (zarr's store) reads it, that ``path`` is a regular file
    of at most ``bound`` bytes (None: any size). Returns False when there is no file; raises
    ChunkDecodeError naming ``key`` otherwise."""
    try:
        fd, st = open_regular(path, key, store)
    except FileNotFoundError:
        return False
    os.close(fd)
    if bound is not None and st.st_size > bound:
        raise refused(key, too_large(st.st_size, bound), store)
    return True
