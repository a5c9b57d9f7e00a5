"""Files in a local store: the chunk (shard) files of an array, and the one way zopt replaces a
file (``atomic_write``: a temporary file beside it, then ``os.replace``).

Every temporary file zopt makes is named ``temp_path`` gives: ``.<name>.zopt-<tag>`` (hidden;
``TMP_MARK`` in the name, which is how a killed job's leftovers are found and removed).
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from zopt.compat.zarr_compat import regular_chunk_shape

__all__ = ["TMP_MARK", "atomic_write", "chunk_files", "temp_path", "walk_files", "write_all"]

#: in the name of every temporary file zopt writes (``temp_path``)
TMP_MARK = ".zopt-"

#: what ``atomic_write`` writes: bytes; pieces written one after the other; or ``{offset: bytes}``
#: written at their offsets (the gaps are holes)
Buffer = bytes | bytearray | memoryview | np.ndarray
Data = Buffer | Sequence[Buffer] | Mapping[int, Buffer]


def chunk_files(store: str | os.PathLike[str], array: zarr.Array[Any]) -> Iterator[tuple[tuple[int, ...], Path]]:
    """``(coords, path)`` of every stored chunk (shard) file of ``array`` in a local store."""
    meta = array.metadata
    chunks = regular_chunk_shape(meta)
    if chunks is None:
        raise ValueError(f"array {array.path!r}: a regular chunk grid is needed to list its chunk files")
    grid = tuple(math.ceil(s / c) for s, c in zip(array.shape, chunks, strict=True))
    root = Path(os.fspath(store)) / array.path
    for coords in np.ndindex(*grid):
        path = root / meta.encode_chunk_key(coords)
        if path.is_file():
            yield coords, path


def walk_files(root: str | os.PathLike[str]) -> Iterator[tuple[str, os.stat_result]]:
    """``(path, stat)`` of every file under the directory ``root``, as ``os.walk`` lists them (a
    link to a directory is not entered; a file's link is followed), with one ``stat`` per file
    (issue 34: ``os.walk`` and ``os.path.getsize`` per chunk file held the GIL ~20 µs a file).
    Unreadable directories are skipped, as ``os.walk`` does."""
    stack = [os.fspath(root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir():
                if not entry.is_symlink():
                    stack.append(entry.path)
            else:
                yield entry.path, entry.stat()


def temp_path(path: str | os.PathLike[str], tag: str, tmp_dir: str | os.PathLike[str] | None = None) -> Path:
    """The temporary file ``.<name of path>.zopt-<tag>`` in ``tmp_dir`` (same filesystem as
    ``path``), else beside ``path``."""
    path = Path(path)
    return Path(tmp_dir if tmp_dir is not None else path.parent) / f".{path.name}{TMP_MARK}{tag}"


def _view(data: Buffer) -> memoryview:
    view = memoryview(data.data if isinstance(data, np.ndarray) else data)  # ndarray.data: typed as a buffer
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def write_all(fd: int, parts: Sequence[memoryview]) -> None:
    """Write ``parts`` (1-D byte memoryviews) one after another at ``fd``'s position, one
    ``write`` per part, going on where a partial write stopped. (Issue 34: one ``writev`` of a
    whole shard's parts cost the kernel three times the system time of a write per part.)"""
    for part in parts:
        while part.nbytes:
            part = part[os.write(fd, part):]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], data: Data, *, fsync: bool, size: int | None = None,
                 tmp_dir: str | os.PathLike[str] | None = None) -> int:
    """Replace the file ``path`` with ``data``: a reader (and a process killed at any point)
    finds the old file or the new one whole, never a part of it.

    data : bytes (or any 1-D-castable buffer); a sequence of them, written one after the other;
        or ``{offset: bytes}``, each written at its offset (the gaps are holes).
    size : the new file's size in bytes (it is truncated or extended to it); default: as written.
    tmp_dir : where the temporary file (``temp_path``) is written, on the same filesystem as
        ``path``; default: beside it.
    fsync : True: the file, then its directory, are flushed to the disk before and after the
        rename, so the new file survives a power loss once this returns; False: the page cache
        decides (a crash of the machine may lose the new file, never tear the old one).

    Returns the new file's size. Raises OSError (e.g. ENOSPC) with ``path`` untouched and the
    temporary file removed.
    """
    path = Path(path)
    tmp = temp_path(path, f"tmp-{uuid.uuid4().hex}", tmp_dir)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            if isinstance(data, Mapping):
                end = 0
                for off, part in data.items():
                    view = _view(part)
                    while view.nbytes:  # pwrite may write less than asked, like write
                        n = os.pwrite(fd, view, off)
                        view, off = view[n:], off + n
                    end = max(end, off)
            else:
                parts = [_view(data)] if isinstance(data, bytes | bytearray | memoryview | np.ndarray) else [
                    _view(p) for p in data]
                write_all(fd, parts)
                end = sum(p.nbytes for p in parts)
            if size is not None and size != end:
                os.ftruncate(fd, size)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    if fsync:
        _fsync_dir(path.parent)
    return end if size is None else size
