"""A netCDF or HDF5 file checked whole before anything reads it: a truncated file is refused.

netCDF-C reads the missing end of a truncated netCDF-3 file as zeros or garbage, without an
error: a copy cut at 20 MB was recompressed with made-up rows, and ``zopt verify`` compared
them with the same made-up rows. Both formats say how long a complete file is:

- netCDF-3 (classic ``CDF\\x01``, 64-bit offset ``CDF\\x02``, 64-bit data ``CDF\\x05``): the
  header gives each variable's begin offset and shape, and ``numrecs`` the records written;
  the file must hold the last byte of every variable (``expected_size``: the end of the last
  fixed variable's data, and of the last record variable in the last record). The header itself
  cut short is refused too. Spec: the netCDF classic format specification (Unidata, "File
  Format Specifications").
- HDF5 (netCDF-4): the superblock (at 0, 512, 1024, 2048, …) holds the end-of-file address; a
  file shorter than it is truncated (the HDF5 library refuses it too, as ``NetCDF: HDF error``).

``check_file(path)`` raises ``TruncatedFileError`` naming the file and both sizes. Anything
else (a Zarr store, a URL, another format) passes unchecked: the reader that opens it decides.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO

from zopt.errors import ZoptError

__all__ = ["TruncatedFileError", "check_bytes", "check_file", "expected_size"]

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# netCDF-3 external types: NC_BYTE … NC_DOUBLE, then CDF-5's NC_UBYTE … NC_UINT64
_TYPE_SIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 4, 6: 8, 7: 1, 8: 2, 9: 4, 10: 8, 11: 8}
_ABSENT, _DIMENSION, _VARIABLE, _ATTRIBUTE = 0, 10, 11, 12
_STREAMING = 0xFFFFFFFF


class TruncatedFileError(ZoptError, ValueError):
    """A netCDF/HDF5 file shorter than its own header says (or corrupt there). ``path``,
    ``expected`` (bytes, or None when the header itself is cut short) and ``actual`` (bytes)."""

    def __init__(self, path: str, expected: int | None, actual: int, why: str) -> None:
        self.path, self.expected, self.actual = path, expected, actual
        super().__init__(f"src: {path}: truncated or corrupt file: {why}")


class _Short(ZoptError):
    """The header asks for bytes past the end of the file (internal: becomes TruncatedFileError)."""


class _Header:
    """Sequential big-endian reads of a netCDF-3 header (64-bit counts for CDF-5)."""

    def __init__(self, f: BinaryIO, version: int) -> None:
        self.f, self.version = f, version

    def take(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) < n:
            raise _Short
        return data

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def count(self) -> int:  # NON_NEG: 8 bytes in CDF-5
        return struct.unpack(">Q", self.take(8))[0] if self.version == 5 else self.u32()

    def offset(self) -> int:  # OFFSET: 4 bytes in CDF-1, 8 in CDF-2 and CDF-5
        return self.u32() if self.version == 1 else struct.unpack(">Q", self.take(8))[0]

    def skip_padded(self, n: int) -> None:
        self.take(n + (-n % 4))

    def name(self) -> None:
        self.skip_padded(self.count())

    def list_header(self, tag: int) -> int:
        """The number of entries of a dim/att/var list (0 for ABSENT); ValueError on a wrong tag."""
        found, n = self.u32(), self.count()
        if found not in (_ABSENT, tag) or (found == _ABSENT and n != 0):
            raise ValueError(f"list tag {found} where {tag} was expected")
        return n

    def attributes(self) -> None:
        for _ in range(self.list_header(_ATTRIBUTE)):
            self.name()
            kind = self.u32()
            if kind not in _TYPE_SIZE:
                raise ValueError(f"unknown attribute type {kind}")
            self.skip_padded(self.count() * _TYPE_SIZE[kind])


def _netcdf3_size(f: BinaryIO, version: int) -> int | None:
    """The least size of a complete netCDF-3 file, from its header (``f`` after the magic);
    None for a streaming file (numrecs not recorded). Raises _Short, ValueError (malformed)."""
    h = _Header(f, version)
    numrecs = h.count()
    dims = []
    for _ in range(h.list_header(_DIMENSION)):
        h.name()
        dims.append(h.count())
    h.attributes()
    variables = []  # (record variable, bytes per record or in all, begin)
    for _ in range(h.list_header(_VARIABLE)):
        h.name()
        ids = [h.count() for _ in range(h.count())]
        h.attributes()
        kind = h.u32()
        h.count()  # vsize: redundant, and 2**32-1 for variables over 4 GiB
        begin = h.offset()
        if kind not in _TYPE_SIZE or any(i >= len(dims) for i in ids):
            raise ValueError(f"variable of type {kind} on dimensions {ids} of {len(dims)}")
        record = bool(ids) and dims[ids[0]] == 0
        n = _TYPE_SIZE[kind]
        for i in ids[1:] if record else ids:
            n *= dims[i]
        variables.append((record, n, begin))
    end = f.tell()
    if numrecs == (2**64 - 1 if version == 5 else _STREAMING):  # streaming: numrecs not recorded
        return None
    records = [(n, begin) for rec, n, begin in variables if rec]
    # one record variable: its records are not padded to 4 bytes; several: each one padded
    recsize = records[0][0] if len(records) == 1 else sum(n + (-n % 4) for n, _ in records)
    for rec, n, begin in variables:
        if rec:
            end = max(end, begin + (numrecs - 1) * recsize + n) if numrecs and n else end
        elif n:
            end = max(end, begin + n)
    return end


def _hdf5_size(f: BinaryIO, size: int) -> int | None:
    """``base address + end-of-file address`` from an HDF5 superblock, None when no signature."""
    where = 0
    while where + 8 <= size:
        f.seek(where)
        if f.read(8) == _HDF5_SIGNATURE:
            break
        where = 512 if where == 0 else where * 2
    else:
        return None
    head = f.read(16)
    if len(head) < 1:
        raise _Short
    version = head[0]
    if version in (0, 1):  # the size of offsets at byte 5; the addresses after 16 (+4 for v1) bytes
        if len(head) < 16:
            raise _Short
        size_of_offsets = head[5]
        f.seek(where + 8 + 16 + (4 if version == 1 else 0))  # base, free-space, end-of-file addresses
    elif version in (2, 3):
        if len(head) < 3:
            raise _Short
        size_of_offsets = head[1]
        f.seek(where + 8 + 4)  # base, superblock extension, end-of-file addresses
    else:
        return None  # a future superblock version: the HDF5 library decides
    if size_of_offsets not in (2, 4, 8):
        raise ValueError(f"HDF5 superblock: size of offsets {size_of_offsets}")
    fmt = {2: "<H", 4: "<I", 8: "<Q"}[size_of_offsets]
    data = f.read(size_of_offsets * 3)
    if len(data) < size_of_offsets * 3:
        raise _Short
    base, _, eof = (struct.unpack(fmt, data[i * size_of_offsets:(i + 1) * size_of_offsets])[0] for i in range(3))
    if eof == 2 ** (8 * size_of_offsets) - 1:  # undefined address: nothing to compare
        return None
    return int(base + eof)


def expected_size(path: str | os.PathLike[str]) -> tuple[str, int | None] | None:
    """``(format, least complete size in bytes or None for a streaming netCDF-3 file)`` of a
    netCDF-3 or HDF5 file, None for anything else. Raises TruncatedFileError when the header
    itself is cut short or malformed."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        return _expected(f, size, path)


def _expected(f: BinaryIO, size: int, path: str) -> tuple[str, int | None] | None:
    magic = f.read(4)
    try:
        if magic[:3] == b"CDF" and len(magic) == 4 and magic[3] in (1, 2, 5):
            return f"netCDF-3 (CDF-{magic[3]})", _netcdf3_size(f, magic[3])
        found = _hdf5_size(f, size)
        return None if found is None else ("HDF5", found)
    except _Short:
        raise TruncatedFileError(path, None, size, f"its header is cut short at byte {size}") from None
    except (ValueError, struct.error) as exc:
        raise TruncatedFileError(path, None, size, f"its header is not valid ({exc})") from None


def check_file(path: str | os.PathLike[str]) -> None:
    """Refuse a netCDF-3 or HDF5 file shorter than its header says (see the module docstring).

    Raises TruncatedFileError naming ``path``, the size the header needs and the size found.
    A directory, a URL or another format passes (nothing to check here)."""
    path = os.fspath(path)
    if "://" in path or not os.path.isfile(path):
        return
    found = expected_size(path)
    if found is None:
        return
    kind, need = found
    if need is None:
        return
    _refuse_short(path, kind, need, os.path.getsize(path))


def check_bytes(data: bytes, path: str) -> None:
    """``check_file`` of a file's bytes read whole (a file on an object store); ``path`` names it."""
    import io

    found = _expected(io.BytesIO(data), len(data), path)
    if found is not None and found[1] is not None:
        _refuse_short(path, found[0], found[1], len(data))


def _refuse_short(path: str, kind: str, need: int, size: int) -> None:
    if size < need:
        raise TruncatedFileError(path, need, size, f"its {kind} header needs at least {need} bytes, the file has "
                                 f"{size} ({need - size} missing: an interrupted copy or download?)")
