"""Local netCDF4/HDF5 files opened with netCDF4 directly, kept open per process and job.

``zopt.io.multi`` reads 10^3–10^5 small files: there the cost is the opens, and netCDF4 opens a
file about six times faster than ``xarray.open_dataset``. Handles are kept per ``(path, job_id)``
in a ``JobCache`` (``MAX_OPEN`` of them, about 0.7 MB of HDF5 caches each) and closed by
``zopt.compat.job_cache.release_job(job_id)`` at the job's end (on every worker too). Every call into
netCDF4 holds xarray's HDF5 lock: the library is not thread-safe, and xarray's own reads take
the same lock.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from zopt.compat.job_cache import JobCache
from zopt.io import locations as loc
from zopt.io.file_check import check_file
from zopt.io.sources import open_dataset, read_source

__all__ = ["MAX_OPEN", "file_variables", "open_count", "read_file"]

MAX_OPEN = 32


def open_count() -> int:
    """How many files this process holds open (tests, diagnostics)."""
    return len(_nc.job_ids())


def _hdf5_lock() -> Any:
    """xarray's lock around the HDF5 library (not thread-safe): our netCDF4 calls take the same one."""
    from xarray.backends.locks import HDF5_LOCK

    return HDF5_LOCK


def _nc_handle(path: str, job_id: str | None) -> Any:
    """A local netCDF4/HDF5 file opened with netCDF4 (no scaling, no masking), kept per ``(path,
    job_id)``, or a file on an object store read whole (``zopt.io.remote_files``); None for anything
    else (Zarr stores, netCDF4 missing or refusing the file).
    netCDF4 directly opens a file about 6× faster than ``xarray.open_dataset`` (the summaries
    and reads of 10^4 files are mostly opens). Call with the HDF5 lock held (an evicted handle
    is closed in this call)."""
    if loc.is_url(path):  # a file on an object store: read whole, opened from memory (None for a store)
        from zopt.io.remote_files import open_remote_netcdf, released

        return _nc.get(job_id, path, lambda: open_remote_netcdf(path, lambda: released(_hdf5_lock())))
    if not os.path.isfile(path):
        return None
    return _nc.get(job_id, path, lambda: _open_nc(path))


def _open_nc(path: str) -> Any:
    """The file opened with netCDF4, or None where netCDF4 is missing or refuses it (not cached)."""
    check_file(path)  # TruncatedFileError: netCDF-C would read the missing end as zeros
    try:
        import netCDF4

        nc = netCDF4.Dataset(path, "r")
    except (ImportError, OSError):
        return None
    nc.set_auto_maskandscale(False)
    return nc


#: (job, path) -> the file opened with netCDF4
_nc: JobCache[Any] = JobCache("netCDF4 files", MAX_OPEN, close=lambda nc: nc.close(), release_lock=_hdf5_lock)


def read_file(path: str, name: str, region: tuple[slice, ...], job_id: str | None) -> np.ndarray:
    """``region`` of variable ``name`` of one file, as stored (netCDF4 directly, else ``read_source``)."""
    with _hdf5_lock():
        nc = _nc_handle(path, job_id)
        if nc is not None:
            return np.asarray(nc.variables[name][region if region else ...])
    return np.asarray(read_source(path, name, region, job_id))


def file_variables(path: str, job_id: str) -> tuple[dict[str, tuple[Any, ...]], dict[str, int]]:
    """``({name: (dims, dtype, shape, attrs, read)}, {dim: size})`` of one file, as xarray's
    ``decode_cf=False`` view gives them (netCDF4 directly when it can; ``read()`` loads the values)."""
    with _hdf5_lock():
        nc = _nc_handle(path, job_id)
        if nc is not None:
            out = {}
            for name, v in nc.variables.items():
                dtype = np.dtype(object) if v.dtype is str else np.dtype(v.dtype)
                attrs = {k: v.getncattr(k) for k in v.ncattrs()}
                out[name] = (tuple(v.dimensions), dtype, tuple(v.shape), attrs,
                             lambda name=name: read_file(path, name, (), job_id))
            return out, {d: len(x) for d, x in nc.dimensions.items()}
    ds = open_dataset(path, job_id)
    return ({str(n): (tuple(map(str, v.dims)), v.dtype, tuple(v.shape), dict(v.attrs), lambda v=v: np.asarray(v.values))
             for n, v in ds.variables.items()}, {str(d): int(n) for d, n in ds.sizes.items()})
