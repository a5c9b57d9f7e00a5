"""One path as a source (``PathSource``), opened through xarray, cached per job and keyed on its identity.

``PathSource`` is one local path or fsspec URL, a ``Source`` (``zopt.io.source_kinds``): a Zarr
v2/v3 store or a netCDF/HDF5 file, read through xarray (``open_dataset``, below) except for Zarr
v3 arrays, read through zarr.

The tasks of one job running in one process share one open file (opening a netCDF file per
task is slow). The cache key is the source's resolved path, its identity on disk (size and
modification time of the file, or of a Zarr store's metadata files) and the job's id, so a
source changed between two jobs in the same process (a notebook re-run, a long-lived
``tcp://`` worker) is opened again, never served stale. The caches are ``JobCache``s:
``zopt.compat.job_cache.release_job(job_id)`` closes a job's datasets when it ends (on distributed
workers too), so no file stays open or locked.

``arrays_in(store, names)`` lists the Zarr arrays of a local store (analysis, info, compaction).
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr
import zarr
from zarr.core.metadata import ArrayV3Metadata

from zopt.compat.job_cache import JobCache
from zopt.compat.zarr_compat import open_array, unservable_array_error
from zopt.errors import OptionError
from zopt.io import locations as loc
from zopt.io.file_check import TruncatedFileError, check_file
from zopt.io.source_check import check_store, load_json
from zopt.io.source_kinds import CombinedSource, Source, SourceIdentity, SourceVariable, open_source
from zopt.notes import Note
from zopt.store.shards import v3_metadata

if TYPE_CHECKING:
    from zarr.storage import StoreLike

    from zopt.store.raw_read import RawChunkReader

__all__ = [
    "CombinedSource",
    "PathSource",
    "Source",
    "SourceVariable",
    "arrays_in",
    "cached_tokens",
    "child_groups",
    "children_to_copy",
    "hierarchy_dims",
    "is_zarr",
    "not_a_store",
    "open_source",
    "read_source",
    "root_array_variable",
    "root_array_metadata",
    "source_identity",
    "source_variables",
    "zarr_v3_group",
]

_ZARR_METADATA = ("zarr.json", ".zgroup", ".zarray", ".zmetadata")
_MAX_OPEN = 8
_open_lock = threading.Lock()  # serialises opens (see open_source)
#: (job, source identity) -> the source opened through xarray
_datasets: JobCache[xr.Dataset] = JobCache("source datasets", _MAX_OPEN, close=lambda ds: ds.close())
_MAX_ARRAYS = 64
#: (job, (src, variable)) -> (zarr array or None, raw reader or None): a job's tasks open each source array once per process
_arrays: JobCache[tuple[zarr.Array[Any] | None, RawChunkReader | None]] = JobCache("source arrays", _MAX_ARRAYS)


def is_zarr(path: object) -> bool:
    """True if ``path`` (a local directory or an fsspec URL) has Zarr metadata (v2 or v3) at its root;
    False for anything that is not a path (None: a source that is no one path, ``Source.location``)."""
    if not isinstance(path, str | os.PathLike):
        return False
    path = os.fspath(path)
    if loc.is_url(path):
        return any(loc.isfile(loc.join(path, n)) for n in _ZARR_METADATA)
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, n)) for n in _ZARR_METADATA)


def not_a_store(path: str, label: str) -> ValueError:
    """The error for a directory ``path`` without Zarr metadata at its root (``label``: the
    argument, ``src``/``dst``/``store``), naming the Zarr stores directly inside it, if any."""
    inner = [n for n in sorted(loc.subdirs(path)) if is_zarr(loc.join(path, n))] if loc.isdir(path) else []
    hint = (f"; it holds the Zarr store{'s' if len(inner) > 1 else ''} {', '.join(inner[:5])}"
            f"{' …' if len(inner) > 5 else ''}: give {'it' if len(inner) == 1 else 'one of them'} "
            f"({loc.join(path, inner[0])})" if inner else "")
    return ValueError(f"{label}: {path!r} is not a Zarr store (no zarr.json, .zgroup or .zarray at its root){hint}")


def source_identity(src: str) -> tuple[object, ...]:
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


def open_dataset(src: str, job_id: str | None = None) -> xr.Dataset:
    """Open the path or URL ``src`` (Zarr v2/v3 store or netCDF/HDF5 file) lazily, without CF decoding
    (``PathSource.template``; any source: ``open_source(src).template(job_id)``).

    Cached per process under the source's identity (``source_identity``) and ``job_id`` (a job's
    id: ``zopt.compat.job_cache.release_job(job_id)`` closes what the job opened). Raises FileNotFoundError if ``src``
    does not exist. A ``CombinedSource``: its combined template (lazy, nothing cached).
    """
    if not loc.exists(src):
        raise FileNotFoundError(f"source {src!r} does not exist")
    key = source_identity(src)
    # one open at a time: netCDF4/HDF5 crash (SIGSEGV) when two threads open a file at once, and
    # a thread that waited here finds the dataset the first one opened instead of a second copy
    with _open_lock:
        return _datasets.get(job_id, key, lambda: _open(src))


def _open(src: str) -> xr.Dataset:
    kwargs: dict[str, Any] = {"decode_cf": False, "mask_and_scale": False, "decode_times": False, "chunks": None}
    if is_zarr(src):
        with warnings.catch_warnings():  # unconsolidated stores are fine, only slower to open
            warnings.filterwarnings("ignore", message="Failed to open Zarr store with consolidated")
            return xr.open_dataset(loc.zarr_store(src), engine="zarr", consolidated=None, **kwargs)
    if loc.isdir(src):
        raise not_a_store(src, "src")
    if loc.is_url(src):  # a file on an object store: read whole, checked, opened from memory
        from zopt.io.remote_files import open_remote_netcdf

        nc = open_remote_netcdf(src)
        if nc is None:
            raise OptionError("src", f"{src!r} is neither a Zarr store nor a file netCDF4 can read (netCDF/HDF5)")
        return xr.open_dataset(xr.backends.NetCDF4DataStore(nc), **kwargs)  # type: ignore[no-untyped-call]
    check_file(src)  # TruncatedFileError: netCDF-C would read the missing end as zeros
    try:
        return xr.open_dataset(src, **kwargs)
    except OSError as exc:
        if "HDF error" not in str(exc):
            raise
        raise TruncatedFileError(src, None, os.path.getsize(src), f"the HDF5 library cannot read it ({exc})") from exc
    except ValueError as exc:
        if "did not find a match" not in str(exc):
            raise
        raise OptionError("src", f"{src!r} is neither a Zarr store nor a file xarray can read (netCDF/HDF5)") from exc


def cached_tokens() -> list[str | None]:
    """Tokens of the datasets open in this process (for tests and diagnostics)."""
    return _datasets.job_ids()


def root_array_metadata(src: str | None) -> dict[str, Any] | None:
    """The metadata document of a store whose root is an array (``zarr.create_array("x.zarr", …)``),
    v3 ``zarr.json`` or v2 ``.zarray``; None for a group, a netCDF file or anything else (None:
    a source that is no one path)."""
    if src is None or not loc.is_url(src) and not os.path.isdir(src):
        return None
    for doc in ("zarr.json", ".zarray"):
        try:
            where = loc.join(src, doc)
            meta = load_json(loc.read_bytes(where), where)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
        if not isinstance(meta, dict):
            return None
        return meta if doc == ".zarray" or meta.get("node_type") == "array" else None
    return None


def child_groups(src: str) -> list[str]:
    """Names of the groups directly inside ``src``'s root group: subdirectories of a Zarr store
    holding group metadata, or the groups of a netCDF4/HDF5 file (``[]`` for other formats)."""
    if loc.is_url(src) or os.path.isdir(src):
        found = []
        for name in loc.subdirs(src):
            try:
                where = loc.join(src, name, "zarr.json")
                doc = load_json(loc.read_bytes(where), where)
                if isinstance(doc, dict) and doc.get("node_type") == "group":
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


def _is_group(location: str) -> bool:
    """True if ``location`` holds Zarr group metadata (v3 ``zarr.json`` of a group, or v2 ``.zgroup``)."""
    try:
        doc = json.loads(loc.read_bytes(loc.join(location, "zarr.json")))
        return isinstance(doc, dict) and doc.get("node_type") == "group"
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, ValueError):
        return loc.exists(loc.join(location, ".zgroup"))


def hierarchy_dims(src: str | None) -> set[str]:
    """The dimension names of every array of the Zarr hierarchy holding ``src`` (from the topmost
    group above it, child groups included; ``dim_0``… for arrays without names), or an empty set
    when ``src`` is not a group inside a hierarchy (no child groups, no group above it; None)."""
    if src is None or not is_zarr(src):
        return set()
    top = src.rstrip("/")
    while True:
        parent = top.rsplit("/", 1)[0] if loc.is_url(top) else os.path.dirname(top)
        if not parent or parent == top or not _is_group(parent):
            break
        top = parent
    if top == src.rstrip("/") and not child_groups(src):
        return set()
    found: set[str] = set()
    with warnings.catch_warnings():  # zarr warns about a rewriting job's .zopt-* folders
        warnings.filterwarnings("ignore", message=r"Object at \.zopt-", category=UserWarning)
        for _, node in zarr.open_group(loc.zarr_store(top), mode="r").members(max_depth=None):
            if isinstance(node, zarr.Array):
                meta = node.metadata
                names = (meta.dimension_names if isinstance(meta, ArrayV3Metadata)
                         else node.attrs.get("_ARRAY_DIMENSIONS")) or (None,) * node.ndim
                found.update(str(d) if d else f"dim_{i}" for i, d in enumerate(_listed(names)))
    return found


def _listed(names: object) -> Sequence[object]:
    """Dimension names as a sequence (a Zarr v2 array's ``_ARRAY_DIMENSIONS`` attribute is JSON)."""
    return names if isinstance(names, Sequence) else ()


def children_to_copy(src: str | None, store: StoreLike, plan: object) -> list[str]:
    """The child groups of ``src`` that recompress rewrites into the new store, each as a store of its
    own; ValueError naming them where the hierarchy cannot be kept (a netCDF file's groups, a
    destination store that is not a local directory, a plan, which covers one group). None (no
    one path): none; several files' groups are refused when their summaries are read (zopt.io.multi)."""
    from zopt.io.paths import store_text

    if src is None:
        return []
    children = child_groups(src)
    if not children:
        return []
    if loc.isdir(src) and not is_zarr(src):  # a folder of stores, not a store: not a netCDF file's groups
        raise not_a_store(src, "src")
    if not is_zarr(src):
        raise OptionError("src", f"{src!r} has groups {children}, which recompress would drop (it reads the root "
                         "group of a netCDF file); write each group to its own Zarr store, e.g. with "
                         "xarray.open_dataset(src, group=...).to_zarr(...), and recompress those")
    if store is not None:
        raise OptionError("dst", f"{src!r} has child groups {children}; a hierarchy is rewritten into a local directory "
                         f"only, not into {store_text(store)}")
    if plan is not None:
        raise OptionError("plan", f"{src!r} has child groups {children}; a plan covers the arrays of one group: "
                         "recompress each group with its own plan")
    return children


def arrays_in(store: str | os.PathLike[str], names: Sequence[str] | None = None) -> list[zarr.Array[Any]]:
    """The Zarr arrays of a local store (the store itself if it is an array), by path.

    Raises ValueError naming the arrays that ``names`` asks for and the store lacks, or saying
    ``store`` is not a Zarr store (``not_a_store``), and
    ``zopt.io.source_check.BrokenMetadataError`` naming a metadata document that is not valid JSON
    (with the byte offset) or a broken array document (``check_store``).
    """
    if not is_zarr(os.fspath(store)):
        raise not_a_store(os.fspath(store), "store")
    check_store(os.fspath(store))
    node = zarr.open(os.fspath(store), mode="r")
    if isinstance(node, zarr.Array):
        found = {"": node}
    else:
        with warnings.catch_warnings():  # zarr warns about a rewriting job's .zopt-lock and .zopt-jobs
            warnings.filterwarnings("ignore", message=r"Object at \.zopt-", category=UserWarning)
            found = {path: obj for path, obj in node.members(max_depth=None) if isinstance(obj, zarr.Array)}
    if names:
        missing = [n for n in names if n not in found]
        if missing:
            raise OptionError("arrays", f"{missing} not in {os.fspath(store)!r}; it has {sorted(found)}")
        return [found[n] for n in names]
    return [found[k] for k in sorted(found)]


# -- describing and reading a source's variables (the engine, the lossy analysis, verify) -----


def source_variables(src: str | Source, group: zarr.Group | None = None,
                     job_id: str | None = None) -> dict[str, SourceVariable]:
    """The variables of ``src`` (a path or URL, or any ``Source``: ``open_source(src).variables(job_id)``):
    a Zarr v3 group's top-level arrays, read from their metadata (arrays without
    ``dimension_names`` get ``dim_0``, ``dim_1``, … as the analysis names them), or, for Zarr v2
    and netCDF/HDF5, the variables xarray sees (``open_dataset``). ``group``: the group already
    opened from the path ``src``, if the caller has it; ``job_id``: the job's id (see
    ``open_dataset``). Raises FileNotFoundError if ``src`` does not exist."""
    if group is not None:
        return _path_variables(str(src), group, job_id)
    return open_source(src).variables(job_id)


def _path_variables(src: str, group: zarr.Group | None, job_id: str | None) -> dict[str, SourceVariable]:
    if not loc.exists(src):
        raise FileNotFoundError(f"source {src!r} does not exist")
    group = group if group is not None else zarr_v3_group(src)
    if group is not None:
        try:
            arrays = list(group.arrays())
        except (TypeError, ValueError, KeyError) as exc:
            err = unservable_array_error(src, exc)
            if err is None:
                raise
            raise err from exc
        return {
            name: SourceVariable(tuple(a.shape), a.dtype, tuple(
                str(d) if d else f"dim_{i}" for i, d in enumerate(v3_metadata(a).dimension_names or (None,) * a.ndim)))
            for name, a in arrays
        }
    ds = open_dataset(src, job_id)
    return {str(n): SourceVariable(tuple(v.shape), v.dtype, tuple(map(str, v.dims))) for n, v in ds.variables.items()}


def read_source(src: str | Source, name: str, region: tuple[slice, ...], job_id: str | None = None) -> np.ndarray:
    """The values of ``region`` of variable ``name`` of ``src`` (no CF decoding), as numpy:
    ``open_source(src).read(name, region, job_id)`` (``PathSource.read``, ``MultiSource.read``, …)."""
    return open_source(src).read(name, region, job_id)


def _read_path(src: str, name: str, region: tuple[slice, ...], job_id: str | None) -> np.ndarray:
    """``PathSource.read``: a raw-stored array of a local Zarr v3 store is read with positional reads of
    just the covered rows of each stored chunk (``zopt.store.raw_read``), any other Zarr v3 array
    through zarr with zopt's checks (``zopt.store.checked_read``: corrupt shards and chunks named, a
    torn read retried once), anything else through xarray (``open_dataset(src, job_id)``)."""
    array, reader = _zarr_source(src, name, job_id)
    if reader is not None and array is not None:  # a reader comes with its array
        return reader.read_region(region, array.fill_value)
    if array is not None and array.metadata.zarr_format == 3:
        from zopt.store.checked_read import read_region

        return read_region(array, region, src if os.path.isdir(src) else None)
    if array is not None and not name:  # a root array: no xarray view
        return np.asarray(array[region])
    return open_dataset(src, job_id)[name].variable[region].values


def _zarr_source(src: str, name: str, job_id: str | None) -> tuple[zarr.Array[Any] | None, RawChunkReader | None]:
    """``(zarr array, RawChunkReader or None)`` of variable ``name`` of a Zarr source, or ``(None,
    None)`` for another source; opened once per process for a job (``job_id``: ``release_job`` forgets it)."""
    if job_id is None:
        return _open_zarr_source(src, name)
    return _arrays.get(job_id, (src, name), lambda: _open_zarr_source(src, name))


def _open_zarr_source(src: str, name: str) -> tuple[zarr.Array[Any] | None, RawChunkReader | None]:
    from zopt.store.raw_read import RawChunkReader

    array: zarr.Array[Any] | None = None
    reader: RawChunkReader | None = None
    if is_zarr(src):
        try:
            array = open_array(loc.zarr_store(src), path=name, mode="r")
        except (KeyError, ValueError, FileNotFoundError, zarr.errors.ArrayNotFoundError):  # e.g. a group-less layout
            array = None
        reader = RawChunkReader.open(src, array) if array is not None else None
    return array, reader


def zarr_v3_group(src: str | None) -> zarr.Group | None:
    """``src`` (a local path or fsspec URL) opened read-only if it is a Zarr v3 group, else None (and
    for None: a source that is no one path)."""
    if src is None:
        return None
    if not loc.isfile(loc.join(src, "zarr.json")):
        return None
    try:
        return zarr.open_group(loc.zarr_store(src), mode="r", zarr_format=3)
    except (ValueError, TypeError, FileNotFoundError, zarr.errors.GroupNotFoundError):
        return None


def root_array_variable(src: str, meta: dict[str, Any]) -> dict[str, SourceVariable]:
    """``{"": SourceVariable}`` for a store whose root is an array (v2 or v3)."""
    array = zarr.open_array(loc.zarr_store(src), mode="r")
    names = meta.get("dimension_names") or meta.get("attributes", {}).get("_ARRAY_DIMENSIONS")
    if names is None:
        names = dict(array.attrs).get("_ARRAY_DIMENSIONS")
    dims = tuple(str(d) if d else f"dim_{i}" for i, d in enumerate(names or (None,) * array.ndim))
    return {"": SourceVariable(tuple(array.shape), array.dtype, dims)}


class PathSource(str):
    """One local path or fsspec URL as a ``Source``: a Zarr v2/v3 store (its root group's arrays, or
    a root array) or a netCDF/HDF5 file. A ``str`` (the path as given): every function taking a path
    takes it, and it pickles, hashes and prints as the path does."""

    __slots__ = ()
    concat_dim: str | None = None
    repacks: Mapping[str, Any] = MappingProxyType({})
    notes: Sequence[Note] = ()

    @classmethod
    def claims(cls, src: object, concat_dim: str | None) -> bool:
        return concat_dim is None and isinstance(src, str | os.PathLike)

    @classmethod
    def open(cls, src: str | os.PathLike[str], concat_dim: str | None, combine: str, scheduler: str | None
             ) -> PathSource:
        return cls(os.fspath(src))

    @property
    def text(self) -> str:
        return str(self)

    @property
    def location(self) -> str:
        return str(self)

    @property
    def files(self) -> tuple[str, ...]:
        return (str(self),)

    def zarr_store(self) -> PathSource | None:
        return self if is_zarr(self) else None

    def total_bytes(self) -> int:
        return loc.total_bytes(self)

    def variables(self, job_id: str | None = None) -> dict[str, SourceVariable]:
        return _path_variables(self, None, job_id)

    def read(self, name: str, region: tuple[slice, ...], job_id: str | None = None) -> np.ndarray:
        return _read_path(self, name, region, job_id)

    def template(self, job_id: str | None = None) -> xr.Dataset:
        return open_dataset(self, job_id)

    def identify(self, names: Sequence[str]) -> SourceIdentity:
        return SourceIdentity(str(self))
