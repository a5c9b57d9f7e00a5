"""A netCDF/HDF5 file on an object store (``s3://bucket/archive/a.nc``), opened from its bytes.

The file is read whole with one GET through its location (``zopt.io.locations.where``: obstore
or fsspec), checked as a local file is (``zopt.io.file_check.check_bytes``: a truncated file is
refused naming it) and opened with netCDF4 from memory (netCDF-C's ``nc_open_mem``: netCDF-3 and
netCDF-4/HDF5 alike). One request per file suits archives of many small files; a file is held in
memory while it is open (``zopt.io.files`` keeps at most ``MAX_OPEN`` open per process).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from zopt.io import locations as loc
from zopt.io.file_check import check_bytes

__all__ = ["LockLike", "open_remote_netcdf", "released"]


class LockLike(Protocol):
    """A lock taken and let go by hand (``threading.Lock``, xarray's ``SerializableLock``)."""

    def acquire(self) -> Any: ...

    def release(self) -> Any: ...


def open_remote_netcdf(url: str, unlocked: Callable[[], AbstractContextManager[Any]] | None = None) -> Any:
    """The netCDF4 ``Dataset`` of the file at ``url`` (no scaling, no masking), or None where it is
    not a file (a Zarr store's prefix), netCDF4 is missing, or netCDF4 cannot read the bytes.
    ``unlocked``: a context manager entered around the GET (``zopt.io.files`` lets go of the HDF5
    lock there, so one thread's download does not stop every other thread's netCDF work).
    Raises TruncatedFileError for a cut file, SourceUnreachableError naming ``url``."""
    try:
        import netCDF4
    except ImportError:
        return None
    try:
        with unlocked() if unlocked is not None else nullcontext():
            data = loc.read_bytes(url)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    check_bytes(data, url)
    try:
        # the name only labels the dataset (a URL would send netCDF-C to fetch it itself)
        nc = netCDF4.Dataset(url.rsplit("/", 1)[-1] or "remote.nc", mode="r", memory=data)
    except OSError:
        return None
    nc.set_auto_maskandscale(False)
    return nc


@contextmanager
def released(lock: LockLike) -> Iterator[None]:
    """``lock`` (held by the caller) let go for the block and taken again after it, however it ends."""
    lock.release()
    try:
        yield
    finally:
        lock.acquire()
