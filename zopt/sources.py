"""Opening a source through xarray, cached per job and keyed on the source's identity.

The tasks of one job running in one process share one open file (opening a netCDF file per
task is slow). The cache key is the source's resolved path, its identity on disk (size and
modification time of the file, or of a Zarr store's metadata files) and the job's token, so a
source changed between two jobs in the same process (a notebook re-run, a long-lived
``tcp://`` worker) is opened again, never served stale. ``release(token)`` closes a job's
datasets when it ends (on distributed workers too), so no file stays open or locked.

``arrays_in(store, names)`` lists the Zarr arrays of a local store (analysis, info, compaction).
"""

from __future__ import annotations

import collections
import os
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import xarray as xr
import zarr

from zopt import locations as loc

__all__ = ["arrays_in", "cached_tokens", "is_zarr", "open_source", "release", "source_identity"]

_ZARR_METADATA = ("zarr.json", ".zgroup", ".zarray", ".zmetadata")
_MAX_OPEN = 8
_lock = threading.Lock()
_cache: collections.OrderedDict[tuple, xr.Dataset] = collections.OrderedDict()


def is_zarr(path: str) -> bool:
    """True if ``path`` (a local directory or an fsspec URL) has Zarr metadata (v2 or v3) at its root."""
    if loc.is_url(path):
        return any(loc.exists(loc.join(path, n)) for n in _ZARR_METADATA)
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, n)) for n in _ZARR_METADATA)


def source_identity(src: str) -> tuple:
    """``(resolved path, (name, size, mtime_ns) …)`` of a file, or of a Zarr store's root metadata
    files: changes when the file (or the store's metadata) is rewritten. A URL: itself."""
    if loc.is_url(src):
        return (src,)
    path = os.path.realpath(src)
    files = [os.path.join(path, n) for n in _ZARR_METADATA] if os.path.isdir(path) else [path]
    stats = []
    for f in files:
        try:
            st = os.stat(f)
        except FileNotFoundError:
            continue
        stats.append((os.path.basename(f), st.st_size, st.st_mtime_ns, st.st_ino))
    return (path, tuple(stats))


def open_source(src: str, token: str | None = None) -> xr.Dataset:
    """Open ``src`` (Zarr v2/v3 store or netCDF/HDF5 file) lazily, without CF decoding.

    Cached per process under the source's identity (``source_identity``) and ``token`` (a job's
    id: ``release(token)`` closes what the job opened). Raises FileNotFoundError if ``src``
    does not exist.
    """
    if not loc.exists(src):
        raise FileNotFoundError(f"source {src!r} does not exist")
    key = (source_identity(src), token)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    ds = _open(src)
    with _lock:
        ds = _cache.setdefault(key, ds)
        _cache.move_to_end(key)
        while len(_cache) > _MAX_OPEN:
            _, old = _cache.popitem(last=False)
            old.close()
    return ds


def _open(src: str) -> xr.Dataset:
    kwargs: dict[str, Any] = {"decode_cf": False, "mask_and_scale": False, "decode_times": False, "chunks": None}
    if is_zarr(src):
        with warnings.catch_warnings():  # unconsolidated stores are fine, only slower to open
            warnings.filterwarnings("ignore", message="Failed to open Zarr store with consolidated")
            return xr.open_dataset(src, engine="zarr", consolidated=None, **kwargs)
    if loc.isdir(src):
        raise ValueError(f"src: {src!r} is a directory without Zarr metadata (zarr.json, .zgroup, .zarray) at its root: "
                         "give a Zarr store or a netCDF/HDF5 file")
    try:
        return xr.open_dataset(src, **kwargs)
    except ValueError as exc:
        if "did not find a match" not in str(exc):
            raise
        raise ValueError(f"src: {src!r} is neither a Zarr store nor a file xarray can read (netCDF/HDF5)") from exc


def release(token: str | None) -> int:
    """Close and forget every dataset opened under ``token``. Returns how many."""
    with _lock:
        keys = [k for k in _cache if k[1] == token]
        closing = [_cache.pop(k) for k in keys]
    for ds in closing:
        ds.close()
    return len(closing)


def cached_tokens() -> list[str | None]:
    """Tokens of the datasets open in this process (for tests and diagnostics)."""
    with _lock:
        return [k[1] for k in _cache]


def root_array_metadata(src: str) -> dict | None:
    """The metadata document of a store whose root is an array (``zarr.create_array("x.zarr", …)``),
    v3 ``zarr.json`` or v2 ``.zarray``; None for a group, a netCDF file or anything else."""
    import json

    if not loc.is_url(src) and not os.path.isdir(src):
        return None
    for doc in ("zarr.json", ".zarray"):
        try:
            meta = json.loads(loc.read_bytes(loc.join(src, doc)))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
        return meta if doc == ".zarray" or meta.get("node_type") == "array" else None
    return None


def child_groups(src: str) -> list[str]:
    """Names of the groups directly inside ``src``'s root group: subdirectories of a Zarr store
    holding group metadata, or the groups of a netCDF4/HDF5 file (``[]`` for other formats)."""
    if loc.is_url(src) or os.path.isdir(src):
        import json

        found = []
        for name in loc.subdirs(src):
            try:
                if json.loads(loc.read_bytes(loc.join(src, name, "zarr.json"))).get("node_type") == "group":
                    found.append(name)
            except FileNotFoundError:
                if loc.exists(loc.join(src, name, ".zgroup")):
                    found.append(name)
        return found
    try:
        import netCDF4
    except ImportError:  # without netCDF4 xarray cannot read groups from the file either
        return []
    try:
        with netCDF4.Dataset(src, "r") as nc:
            return sorted(nc.groups)
    except OSError:  # not a netCDF4/HDF5 file (netCDF3 has no groups)
        return []


def arrays_in(store: str | os.PathLike, names: Sequence[str] | None = None) -> list[zarr.Array]:
    """The Zarr arrays of a local store (the store itself if it is an array), by path.

    Raises ValueError naming the arrays that ``names`` asks for and the store lacks.
    """
    node = zarr.open(os.fspath(store), mode="r")
    if isinstance(node, zarr.Array):
        found = {"": node}
    else:
        found = {path: obj for path, obj in node.members(max_depth=None) if isinstance(obj, zarr.Array)}
    if names:
        missing = [n for n in names if n not in found]
        if missing:
            raise ValueError(f"arrays: {missing} not in {os.fspath(store)!r}; it has {sorted(found)}")
        return [found[n] for n in names]
    return [found[k] for k in sorted(found)]
