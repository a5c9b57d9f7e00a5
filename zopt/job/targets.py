"""What a recompress job writes, whatever the destination (``zopt.job.destinations``): its metadata and sizes.

``create_target`` writes the target's metadata (a Zarr v3 source copied at the Zarr level,
anything else through xarray), ``target_arrays`` makes the rewritten arrays' metadata in memory
for the plan of work (``zopt.job.work``) before anything is written, ``stored_sizes`` measures
what an array stores, ``put_shard`` puts a packed shard into a store, ``destination`` tells a
store destination from a local directory.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import xarray as xr
import zarr
from zarr.core.metadata import ArrayV3Metadata

from zopt.errors import ZoptError
from zopt.io import locations as loc
from zopt.io.paths import OverlapError, store_text
from zopt.io.sources import SourceVariable, is_zarr, open_source
from zopt.store.files import walk_files
from zopt.store.journal import JOURNAL_DIR
from zopt.store.shards import stat_allocated, v3_metadata

if TYPE_CHECKING:
    from zarr.abc.store import Store
    from zarr.storage import StoreLike

    from zopt.io.source_kinds import Source

#: where a target is written: a local directory or a zarr Store
TargetLike: TypeAlias = "str | os.PathLike[str] | Store"
#: ``{name: (inner chunk shape, shard shape or None)}``
Layouts: TypeAlias = "dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]]"

__all__ = [
    "PartialStoreGoneError", "check_no_url_overlap", "chunk_bytes_stored", "create_target", "destination",
    "put_shard", "same_metadata", "stored_bytes_of", "stored_sizes", "target_arrays",
]


class PartialStoreGoneError(ZoptError, FileNotFoundError):
    """A local DST's partial store (``DST.zopt-partial``) was removed by another process while the
    job was writing it; nothing was published."""


def put_shard(store: Store, key: str, data: bytes | list[memoryview] | None) -> None:
    """Put a whole packed shard (bytes, or ``pack_parts``' pieces) at ``key`` of a zarr Store with
    one ``set``, or delete it for None."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    if isinstance(data, list):
        data = b"".join(data)
    if data is None:
        sync(store.delete(key))
    else:
        sync(store.set(key, default_buffer_prototype().buffer.from_bytes(data)))


@dataclass(frozen=True)
class TargetSpec:
    """What the target store holds: the source (``src``, its Zarr v3 root group or None, its
    variables), the variables rewritten (``names``), their ``layouts`` (``{name: (inner chunk
    shape, shard shape or None)}``) and codecs (``splits``: each one's codecs split as
    ``zarr.create_array`` takes them); ``root_meta`` for a store whose root is an array; ``job_id``
    the job's; ``attrs`` extra attributes and ``fills`` fill values per variable (``zopt.lossy``)."""

    src: Source  # a path (PathSource, a str) where source_group or root_meta is set
    source_group: zarr.Group | None
    source: dict[str, SourceVariable]
    names: list[str]
    layouts: Layouts
    splits: dict[str, dict[str, Any]]
    root_meta: dict[str, Any] | None = None
    job_id: str | None = None
    attrs: dict[str, dict[str, Any]] = field(default_factory=dict)
    fills: dict[str, Any] = field(default_factory=dict)


def create_target(spec: TargetSpec, partial: TargetLike, *, only_rewritten: bool = False) -> None:
    """Create the target at ``partial`` (a local path or a zarr Store): group attributes, the other variables with their
    data, and the rewritten variables ``names`` as empty arrays with the new chunking (``layouts``: ``{name: (inner
    chunk shape, shard shape or None)}``) and codecs (``splits``: each one's codecs, split as ``zarr.create_array``
    takes them).

    A Zarr v3 source (``source_group``, opened from ``src``) is copied at the Zarr level: each rewritten array keeps
    the source's data type, fill value, dimension names and attributes (only the chunk grid, chunk key encoding and
    codecs are new), and every other array is copied byte for byte. Anything else (Zarr v2, netCDF/HDF5) goes through
    xarray's ``to_zarr`` with lazy placeholders for the rewritten variables. A store whose root is an array
    (``spec.root_meta``) gets a root array. ``partial`` is new (made empty by the caller): nothing there is
    overwritten, so a store's unfinished marker, put first (``StoreTarget.begin``), stays. ``spec.fills``: fill values to set for a
    non-Zarr-v3 source (``zopt.lossy``: a lossy chain is designed for one fill value). ``only_rewritten``: create the
    rewritten arrays' metadata only (``target_arrays``), nothing else copied.
    """
    src, names, layouts, splits, attrs = spec.src, spec.names, spec.layouts, spec.splits, spec.attrs
    source_group, job_id, fills = spec.source_group, spec.job_id, spec.fills
    if spec.root_meta is not None:
        assert isinstance(src, str)  # a path (TargetSpec.src)
        arr = zarr.open_array(loc.zarr_store(src), mode="r")
        if not names:
            if not only_rewritten:
                copy_array_files(src, partial, "")
            return
        inner, shard = layouts[""]
        meta = arr.metadata
        v3 = meta if isinstance(meta, ArrayV3Metadata) else None
        zarr.create_array(
            partial, shape=arr.shape, dtype=v3.data_type if v3 else arr.dtype, chunks=inner, shards=shard,
            fill_value=meta.fill_value, dimension_names=v3.dimension_names if v3 else None,
            attributes=dict(arr.attrs), zarr_format=3, **splits[""],
        )
        return
    if source_group is not None:
        assert isinstance(src, str)  # a path (TargetSpec.src)
        # no xarray round trip (and no dask.array import) for the common v3 → v3 rewrite
        zarr.create_group(partial, zarr_format=3, attributes=dict(source_group.attrs))
        for name, arr in source_group.arrays():
            if name not in names:
                if not only_rewritten:
                    copy_array_files(os.path.join(src, name), partial, name)
                continue
            inner, shard = layouts[name]
            meta = v3_metadata(arr)
            zarr.create_array(
                partial, name=name, shape=arr.shape, dtype=meta.data_type, chunks=inner, shards=shard,
                fill_value=meta.fill_value, dimension_names=meta.dimension_names,
                attributes={**arr.attrs, **attrs.get(name, {})}, zarr_format=3, **splits[name],
            )
        return
    import dask.array as da

    ds = open_source(src).template(job_id)  # a Source: one file, several files combined
    if only_rewritten:  # xarray encodes variable by variable: the rewritten ones alone give the same metadata
        ds = ds[list(names)]
        ds = ds.drop_vars([c for c in ds.coords if c not in names])
    template = ds.copy()
    for name in names:
        inner, shard = layouts[name]
        var = ds[name]
        if name not in var.dims:  # an index coordinate keeps its values: placeholders would make a bogus index
            template[name] = var.copy(data=da.empty(var.shape, dtype=var.dtype, chunks=shard or inner))
        template[name].attrs.update(attrs.get(name, {}))
    for var_name in template.variables:
        template[var_name].encoding = {}
    encoding = encodings(ds, names, splits, layouts, fills)
    if isinstance(partial, str | os.PathLike):  # a new directory
        template.to_zarr(partial, mode="w-", compute=False, zarr_format=3, consolidated=False, encoding=encoding)
        return
    # a Store holding the unfinished marker: the root group made first (ContainsGroupError where another job's
    # is), then xarray adds to it; the documents are those mode "w-" writes into an empty store
    zarr.create_group(partial, zarr_format=3)
    with warnings.catch_warnings():  # zarr lists the marker as an unknown object of the hierarchy
        warnings.filterwarnings("ignore", message=".*is not recognized as a component of a Zarr hierarchy")
        template.to_zarr(partial, mode="a", compute=False, zarr_format=3, consolidated=False, encoding=encoding)


def target_arrays(spec: TargetSpec) -> dict[str, zarr.Array[Any]]:
    """The rewritten arrays as ``create_target`` makes them, in a ``MemoryStore`` (metadata only,
    nothing written anywhere): ``{name: zarr.Array}`` for the plan of work and ``--dry-run``."""
    memory = zarr.storage.MemoryStore()
    create_target(spec, memory, only_rewritten=True)
    return {name: zarr.open_array(memory, path=name, mode="r") for name in spec.names}


def same_metadata(a: zarr.Array[Any], b: zarr.Array[Any]) -> bool:
    """Whether two arrays have the same shape, data type, chunk grid, chunk keys and codecs."""
    def key(x: zarr.Array[Any]) -> str:
        m = x.metadata.to_dict()
        return json.dumps({k: m.get(k) for k in ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "codecs")},
                          sort_keys=True, default=str)

    return key(a) == key(b)


def chunk_bytes_stored(store: str, name: str) -> int:
    """Bytes of chunk (or shard) files of array ``name`` in a local store, metadata excluded."""
    return stored_sizes(store, name)[0]


def stored_sizes(store: TargetLike, name: str) -> tuple[int, int]:
    """(apparent, allocated) bytes of the chunk files of array ``name`` in a local store (a path),
    or of its chunk keys in a zarr Store (allocated = apparent)."""
    if not isinstance(store, str | os.PathLike):
        from zarr.core.sync import sync

        async def total() -> int:
            return sum([await store.getsize(k) async for k in store.list_prefix(f"{name}/c/" if name else "c/")])

        n = sync(total())
        return n, n
    apparent = allocated = 0
    for path, st in walk_files(Path(store) / name):
        if os.path.basename(path) not in ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"):
            apparent += st.st_size
            allocated += stat_allocated(st)
    return apparent, allocated


def stored_bytes_of(src: str | None, name: str) -> int | None:
    """Bytes of the chunk files of array ``name`` of the Zarr store ``src`` (a path or URL); None for
    another source (a file, several files: ``Source.location``)."""
    if src is None or not is_zarr(src):
        return None
    if loc.is_url(src):
        return sum(n for p, n in loc.files(loc.join(src, name) if name else src)
                   if p.rsplit("/", 1)[-1] not in ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"))
    return chunk_bytes_stored(src, name)


def destination(dst: object) -> tuple[Store | None, str | None]:
    """``(store, None)`` for a destination without positional writes — a ``zarr.abc.store.Store``
    as given, or a URL opened as zarr's ``ObjectStore`` (``s3://…``, ``gs://…``, ``az://…`` with
    obstore installed) or ``FsspecStore`` (``memory://…``, any URL without obstore)
    — and ``(None, path)`` for a local directory (a path or a ``file://`` URL)."""
    from zarr.abc.store import Store

    if isinstance(dst, Store):
        return dst, None
    if not isinstance(dst, str | os.PathLike):
        raise TypeError(f"expected str, bytes or os.PathLike object, not {type(dst).__name__}")  # as os.fspath
    text = os.fspath(dst)
    if text.startswith("file://"):
        return None, text.removeprefix("file://")
    if "://" in text:  # zarr's ObjectStore on obstore (s3, gs, az, http) or an FsspecStore (zopt.io.locations)
        return loc.zarr_store(text, read_only=False), None
    return None, text


def check_no_url_overlap(src: str, store: StoreLike) -> None:
    """OverlapError if the destination store's URL and a URL source are one inside the other."""
    d, s = store_text(store).rstrip("/"), src.rstrip("/")
    if loc.is_url(src) and (d == s or d.startswith(s + "/") or s.startswith(d + "/")):
        raise OverlapError(f"dst: {d} and SRC {s} overlap; writing there would delete or replace the source: "
                           "choose a DST outside SRC")


_METADATA_DOCS = ("zarr.json", ".zarray", ".zattrs", ".zgroup")


def copy_array_files(source_dir: str, target: TargetLike, name: str) -> None:
    """Copy an array's files byte for byte into a local store (a path) or a zarr Store."""
    if isinstance(target, str | os.PathLike) and not loc.is_url(source_dir):
        shutil.copytree(source_dir, os.path.join(target, name), dirs_exist_ok=not name)
        return
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    # metadata documents first: Icechunk takes a chunk key only once its array exists
    for rel, _ in sorted(loc.files(source_dir), key=lambda f: (f[0].rsplit("/", 1)[-1] not in _METADATA_DOCS, f[0])):
        if name == "" and rel.split("/")[0] == JOURNAL_DIR:
            continue
        data = loc.read_bytes(loc.join(source_dir, rel))
        if isinstance(target, str | os.PathLike):
            out = Path(target, name, rel)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
        else:
            key = "/".join([*([name] if name else []), *rel.split(os.sep)])
            sync(target.set(key, default_buffer_prototype().buffer.from_bytes(data)))


def encodings(ds: xr.Dataset, names: list[str], splits: dict[str, dict[str, Any]], layouts: Layouts,
               fills: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    enc = {}
    for name in names:
        inner, shard = layouts[name]
        e = {"chunks": inner, **splits[name]}
        fill = ds[name].encoding.get("fill_value")  # a Zarr source's fill value carries over
        if fill is not None and "_FillValue" not in ds[name].attrs:
            e["fill_value"] = fill
        if fills and fills.get(name) is not None:
            e["fill_value"] = fills[name]
        if shard is not None:
            e["shards"] = shard
        enc[name] = e
    return enc


