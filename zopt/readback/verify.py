"""``zopt verify``: does a recompressed store hold the same arrays as its source?

``verify(src, dst)`` checks, for every array of either store (a root array, arrays of nested
groups by their hierarchy path ``GROUP/NAME``, the variables of a netCDF/HDF5 file):

- presence: an array in one store and not the other is a difference;
- metadata: shape, data type, fill value (bit for bit, so NaN payloads and ``-0.0`` count),
  attributes and dimension names. Chunking and codecs are *expected* to differ (that is what
  recompression changes) and are not compared. The fill value is the ``_FillValue`` attribute
  where xarray stored one (netCDF, Zarr written by ``to_zarr``), else Zarr's ``fill_value``; a
  source without one (netCDF variables without ``_FillValue``, Zarr v2 ``fill_value: null``)
  leaves the destination's free. The ``zopt_lossy`` attribute ``recompress --lossy`` adds, and
  xarray's ``_ARRAY_DIMENSIONS`` (Zarr v2's dimension names), are not attributes here.
- values: bit for bit (raw bit patterns through a same-size unsigned view: NaN payloads
  included), or, for arrays with a ``zopt_lossy`` attribute, within the recorded bound
  (``zopt.lossy.check``).

Values are compared as a Dask graph with one task per *destination write unit* (a shard; a
chunk when unsharded): the unit recompress wrote in one task, so a verify task's memory is the
recompress task's (source and destination regions side by side), its count is the job's, and
each task reads every destination file once. Inside a task the comparison runs inner chunk by
inner chunk, so a difference is reported by its inner chunk's grid coordinates (the destination's
chunk grid), in grid (C) order.
"""

from __future__ import annotations

import math
import os
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.errors import OptionError
from zopt.io.source_kinds import Source
from zopt.lossy.check import bits, bound_text, check_region, information_kept, kind_of
from zopt.readback.endpoints import (
    Endpoint,
    check_endpoint_types,
    endpoint_text,
    is_store,
    store_is_zarr,
    written_output,
)
from zopt.readback.verify_nodes import ArrayMeta
from zopt.readback.verify_nodes import compare_metadata as _compare_metadata
from zopt.readback.verify_nodes import decode_fill as _decode_fill
from zopt.readback.verify_nodes import plain as _plain
from zopt.readback.verify_report import (
    ArrayCheck,
    ChunkDifference,
    VariableCheck,
    VerifyError,
    VerifyReport,
)

if TYPE_CHECKING:
    from zarr.abc.store import Store

    from zopt.types import SourceLike

__all__ = ["ArrayCheck", "ChunkDifference", "VariableCheck", "VerifyError", "VerifyReport", "before_publish_check", "verify"]

#: attributes that are not attributes of the array's data: lossy records and xarray's v2 dimension names
_NOT_ATTRIBUTES = ("_FillValue", "_ARRAY_DIMENSIONS", "zopt_lossy")
LOSSY_ATTRIBUTE = "zopt_lossy"


def before_publish_check(src: SourceLike | Endpoint, dst: Endpoint, *, scheduler: str | None = None,
                         progress: Callable[[int], Any] | None = None,
                         done: list[VerifyReport] | None = None,
                         skip_broken: bool = False,
                         concat_dim: str | None = None,
                         combine: str = "by_coords") -> Callable[[object, list[str]], None]:
    """A ``before_publish`` hook for ``zopt.job.recompress`` (``recompress --verify``): verify
    the finished partial output against ``src`` (every array) and raise ``VerifyError`` (one line
    naming the arrays and where the output is kept) on any difference, so nothing is published.

    src : what ``verify`` reads (a path or URL; with ``concat_dim`` a glob or a list of them).
    dst : the job's destination, as ``recompress`` takes it: a local path (``str`` or
        ``os.PathLike[str]``), an fsspec URL, a ``zarr.abc.store.Store``, an ``icechunk://`` URL or an
        ``icechunk.Repository``. The partial output is compared: the partial directory of a local
        path, the store itself for a URL or a Store (written in place), the job's commit for Icechunk.
    done : the report is appended to it (its ``dst`` names the destination).

    ValueError naming the parameter for a ``src`` or ``dst`` of another type (nothing run)."""
    from zopt.io.multi import check_combine_use

    check_endpoint_types(src, dst, concat_dim)
    check_combine_use(combine, concat_dim)

    def check(partial: object, names: list[str]) -> None:
        from zopt.compat.icechunk_compat import is_icechunk

        target = written_output(partial, dst)
        report = verify(src, target, scheduler=scheduler, progress=progress, skip_broken=skip_broken,
                        concat_dim=concat_dim, combine=combine)
        if not report.ok:
            # an Icechunk job's own note names the work branch that keeps the output; here, what was compared
            kept = f" (compared: {partial})" if is_icechunk(dst) else f", the output is kept in {endpoint_text(target)}"
            raise VerifyError(f"{report.failure_line()}; nothing was published{kept}")
        report.dst = endpoint_text(dst)  # what is published
        if done is not None:
            done.append(report)

    return check


# -- metadata -------------------------------------------------------------------------------


def _zarr_metas(store: str | Store) -> dict[str, ArrayMeta]:
    import zarr
    from zarr.core.metadata import ArrayV3Metadata

    from zopt.io.sources import root_array_metadata

    with warnings.catch_warnings():  # a partial store's .zopt-journal, a store's .zopt-lock: not Zarr nodes
        warnings.filterwarnings("ignore", message=r"Object at \.?zopt-", category=UserWarning)
        if (root_array_metadata(store) is not None if isinstance(store, str)
                else isinstance(zarr.open(store, mode="r"), zarr.Array)):  # a zarr Store (Icechunk)
            found = {"": zarr.open_array(store, mode="r")}
        else:  # not consolidated metadata: what each array's own document says now
            group = zarr.open_group(store, mode="r", use_consolidated=False)
            paths = [p for p, a in group.members(max_depth=None) if isinstance(a, zarr.Array)]
            # each array's own document: a child group's consolidated copy may be stale
            found = {p: zarr.open_array(store, path=p, mode="r", use_consolidated=False) for p in paths}
    out = {}
    for name, a in found.items():
        attrs: dict[str, Any] = dict(a.attrs)
        meta = a.metadata
        names = meta.dimension_names if isinstance(meta, ArrayV3Metadata) else attrs.get("_ARRAY_DIMENSIONS")
        dims = None if names is None or all(d is None for d in names) else tuple(names)
        dtype = np.dtype(a.dtype)
        fill = _decode_fill(attrs["_FillValue"], dtype) if "_FillValue" in attrs else a.fill_value
        shards = getattr(a, "shards", None)
        out[name] = ArrayMeta(tuple(a.shape), dtype, fill, {k: _plain(v) for k, v in attrs.items() if k not in _NOT_ATTRIBUTES},
                          dims, tuple(a.chunks), tuple(shards) if shards else tuple(a.chunks), attrs.get(LOSSY_ATTRIBUTE),
                          a.fill_value)
    return out


def _xarray_metas(src: Source, job_id: str) -> dict[str, ArrayMeta]:
    out = {}
    for name, v in src.template(job_id).variables.items():
        fill = v.attrs.get("_FillValue", v.encoding.get("_FillValue"))
        out[str(name)] = ArrayMeta(tuple(v.shape), np.dtype(v.dtype), fill,
                               {k: _plain(x) for k, x in v.attrs.items() if k not in _NOT_ATTRIBUTES},
                               tuple(map(str, v.dims)) or None)
    return out


def _metas(source: Source, job_id: str) -> dict[str, ArrayMeta]:
    store = source.zarr_store()
    return _zarr_metas(store) if store is not None else _xarray_metas(source, job_id)


# -- values ---------------------------------------------------------------------------------


def _read(source: Source, name: str, region: tuple[slice, ...], job_id: str) -> np.ndarray:
    from zopt.compat.zarr_compat import open_array

    store = source.zarr_store()
    if store is not None and source.location is not None:  # a Zarr path (a zarr Store: StoreSource.read, through zarr)
        array = open_array(store, path=name, mode="r")
        if array.metadata.zarr_format == 2:  # a v2 array of a child group has no xarray view
            return np.asarray(array[region])
    return np.asarray(source.read(name, region, job_id))


def _differs(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Elementwise: do the raw bits of ``x`` and ``y`` differ (values for object arrays)?"""
    if x.dtype.hasobject:
        return np.asarray(x != y, dtype=bool)
    bx, by = bits(x), bits(y)
    if bx.dtype.kind == "u":
        return bx != by
    nb = x.dtype.itemsize
    return (bx.view(np.uint8).reshape(*x.shape, nb) != by.view(np.uint8).reshape(*y.shape, nb)).any(axis=-1)


def _max_abs(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.dtype.kind not in "iuf" or x.size == 0:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        xs, ys = x.astype(np.float64), y.astype(np.float64)
        finite = np.isfinite(xs) & np.isfinite(ys)
        if not finite.any():
            return None
        return float(np.abs(ys[finite] - xs[finite]).max())


@dataclass(frozen=True)
class _ArrayCompare:
    """What every ``_compare_unit`` task of one array is given besides its region: the array's
    ``name``; the destination's ``inner`` chunk shape (differences are counted and listed per inner
    chunk); the lossy ``record`` (``zopt.lossy.check``) the values are checked against, None: bit
    for bit, with its ``sentinels`` (``zopt.lossy.rounding.sentinels_of``); ``limit``: how many
    differing chunks a task lists."""

    name: str
    inner: tuple[int, ...]
    record: dict[str, Any] | None
    sentinels: tuple[Any, ...]
    limit: int


@with_zopt_pipeline
def _compare_unit(src: Source, dst: Source, array: _ArrayCompare, region: tuple[slice, ...],
                  job_id: str) -> dict[str, Any]:
    """Dask task: compare one destination write unit (``region``) of ``array``, inner chunk by inner chunk."""
    from zopt.codecs.grid import regions

    name, inner, record, sentinels, limit = array.name, array.inner, array.record, array.sentinels, array.limit
    x = _read(src, name, region, job_id)
    y = _read(dst, name, region, job_id)
    out: dict[str, Any] = {"n": int(x.size), "viol": 0, "spec": 0, "abs": 0.0, "rel": 0.0, "counts": None,
                           "chunks": 0, "differing": 0, "first": []}
    if x.shape != y.shape or x.dtype != y.dtype:
        out["problem"] = f"region {region} has {y.shape} {y.dtype} in dst, {x.shape} {x.dtype} in src"
        return out
    origin = [r.start for r in region]
    for sub in regions(x.shape, inner):
        out["chunks"] += 1
        xs, ys = x[sub], y[sub]
        where = tuple(slice(o + s.start, o + s.stop) for o, s in zip(origin, sub, strict=True))
        if record is None:
            mask = _differs(xs, ys)
            n = int(mask.sum())
            out["viol"] += n
            diff = _max_abs(xs[mask], ys[mask]) if n else None
            if diff is not None:
                out["abs"] = max(out["abs"], diff)
        else:
            r = check_region(xs, ys, where, record, sentinels)
            n = r["viol"] + r["spec"]
            out["viol"] += r["viol"]
            out["spec"] += r["spec"]
            out["abs"], out["rel"], diff = max(out["abs"], r["abs"]), max(out["rel"], r["rel"]), r["abs"]
            if r["counts"] is not None:
                out["counts"] = r["counts"] if out["counts"] is None else out["counts"] + r["counts"]
            if "kept" in r:
                kept = out.setdefault("kept", [0.0, 0])
                kept[0] += r["kept"][0]
                kept[1] += r["kept"][1]
        if n:
            out["differing"] += 1
            if len(out["first"]) < limit:
                coords = tuple(w.start // c for w, c in zip(where, inner, strict=True))
                out["first"].append(ChunkDifference(coords, tuple((w.start, w.stop) for w in where), n, diff))
    return out


def _endpoint(x: object, what: str) -> object:
    """``x`` (``verify``'s ``src`` or ``dst``) as it is checked and opened: a path as text
    (``os.fspath``), an Icechunk URL or Repository and a zarr Store as they are."""
    from zopt.compat.icechunk_compat import is_icechunk

    if is_icechunk(x) or is_store(x):
        return x
    if isinstance(x, str | os.PathLike):
        return os.fspath(x)
    raise TypeError(f"{what}: expected str, bytes or os.PathLike object, not {type(x).__name__}")


def _opened(p: object, what: str) -> tuple[str | Store, str]:
    """``(what zarr opens, how the report names it)`` of an ``_endpoint``: a local path resolved
    (Dask workers may run in another directory), a URL as it is, a zarr Store (a store destination
    before publish) as it is, an Icechunk branch or snapshot as a read-only store."""
    from zopt.compat.icechunk_compat import is_icechunk, readonly_store
    from zopt.io import locations as loc
    from zopt.io.paths import resolve

    if is_store(p):
        return p, endpoint_text(p)
    if is_icechunk(p):
        return readonly_store(p, what)
    if isinstance(p, str):
        return (p if loc.is_url(p) else resolve(p)), p
    raise TypeError(f"{what}: {p!r} is not a path, a URL, a zarr Store or an Icechunk repository")


@with_zopt_pipeline
def verify(
    src: SourceLike | Endpoint,
    dst: Endpoint,
    arrays: Sequence[str] | None = None,
    *,
    scheduler: str | None = None,
    progress: Callable[[int], Any] | None = None,
    limit: int = 5,
    bounds: dict[str, str] | None = None,
    skip_broken: bool = False,
    concat_dim: str | None = None,
    combine: str = "by_coords",
) -> VerifyReport:
    """Compare ``dst`` (a Zarr v2/v3 store, e.g. one ``zopt recompress`` wrote) with ``src``.

    src : anything ``recompress`` reads: a Zarr v2/v3 store (root array or group, nested groups
        included) or a netCDF/HDF5 file; a local path or an fsspec URL (``s3://…``, ``memory://…``).
    dst : a Zarr store: a local path, an fsspec URL, an Icechunk branch or snapshot
        (``icechunk://…``, an ``icechunk.Repository``) or a ``zarr.abc.store.Store``.
    arrays : array paths to compare (``GROUP/NAME`` inside child groups, ``""`` for a root
        array); default: every array of either store.
    scheduler : ``"threads"`` (default), ``"synchronous"``, ``"processes"`` or a
        ``dask.distributed`` address (``zopt.compat.scheduling.compute``).
    progress : ``progress(n_tasks)`` returning a context manager (zopt's progress bar), or None.
    limit : how many differing chunks to list per array (the first in grid order).
    bounds : ``{array: "abs:E" | "keepbits:K"}``, the bound to check those arrays against
        instead of the ``zopt_lossy`` attribute (which anyone can edit); the report says which
        bound it used.
    skip_broken : source arrays with broken metadata are listed in ``VerifyReport.skipped``
        instead of raising ``zopt.io.source_check.BrokenMetadataError`` (a broken ``dst`` always raises).
    concat_dim : ``src`` is several files (a glob or a list) combined along it, as recompress combines them.
    combine : with ``concat_dim``, ``"by_coords"`` or ``"nested"``, as for recompress.

    Without ``arrays``, the groups' attributes and the destination's consolidated metadata
    (against each node's own ``zarr.json``) are compared too (``zopt.readback.verify_nodes``;
    ``VerifyReport.nodes``).

    Returns a ``VerifyReport`` (one ``ArrayCheck`` per array, sorted by name; see the module
    docstring for what is compared). A variable of several files packed differently
    (``concat_dim``, ``zopt.io.packing``) is compared bit for bit with the files' exact decimal
    values ``p·scale + offset`` and labelled ``re-expressed``: xarray's CF decoding of a file
    rounds its own float sum and may differ from those in the last bit.
    Raises FileNotFoundError for a missing store, ValueError when ``dst`` is not a Zarr store or
    an array of ``arrays`` is in neither store, and the readers' errors for a corrupt chunk
    (``zopt.errors``, naming the chunk key).
    """
    import dask

    from zopt.codecs.grid import regions
    from zopt.compat.icechunk_compat import is_icechunk
    from zopt.compat.job_cache import release_job
    from zopt.compat.scheduling import compute
    from zopt.io import locations as loc
    from zopt.io.multi import check_combine_use
    from zopt.io.sources import is_zarr, not_a_store, open_source
    from zopt.lossy.check import record_problems, stated_record

    check_combine_use(combine, concat_dim)
    # several files combined, as recompress combines them (zopt.io.multi)
    several = None if concat_dim is None else open_source(src, concat_dim=concat_dim, combine=combine,
                                                           scheduler=scheduler)
    src_at = _endpoint(src, "src") if several is None else several
    dst_at = _endpoint(dst, "dst")
    for what, path in (("src", src_at), ("dst", dst_at))[several is not None:]:
        if isinstance(path, str) and not is_icechunk(path) and not loc.exists(path):
            raise FileNotFoundError(f"{what} {path!r} does not exist")
    if not is_icechunk(dst_at) and not (store_is_zarr(dst_at) if is_store(dst_at) else is_zarr(dst_at)):
        if isinstance(dst_at, str):
            raise not_a_store(dst_at, "dst")  # names the Zarr stores inside a folder
        raise OptionError("dst", f"{endpoint_text(dst_at)!r} is not a Zarr store (no zarr.json, .zgroup or .zarray at its root)")
    from zopt.io.source_check import check_store

    skipped = (check_store(src_at, skip_broken) if isinstance(src_at, str) and not is_icechunk(src_at)
               and is_zarr(src_at) else [])
    if isinstance(dst_at, str) and not is_icechunk(dst_at):
        check_store(dst_at)
    # resolved here, on the client: Dask workers may run in another directory; Icechunk: a read-only snapshot
    (src_open, src_text) = (several, several.text) if several is not None else _opened(src_at, "src")
    (dst_open, dst_text) = _opened(dst_at, "dst")
    shown = (src_text, dst_text)
    # zopt.io.source_kinds: read alike, whatever they are
    source, output = open_source(src_open), open_source(dst_open)
    job_id = f"verify-{uuid.uuid4().hex[:12]}"  # the sources the tasks open, closed at the end
    try:
        theirs, ours = _metas(source, job_id), _metas(output, job_id)
        if arrays:
            unknown = [n for n in arrays if n not in theirs and n not in ours]
            if unknown:
                raise OptionError("arrays", f"{unknown} are in neither store; {dst_open!r} has {sorted(ours)}")
            names = sorted(dict.fromkeys(arrays))
        else:
            names = sorted({*ours, *theirs})
        unknown = sorted(set(bounds or {}) - set(ours))
        if unknown:
            raise OptionError("bound", label="--bound", message=f"{unknown} are not arrays of {dst_open!r}, which has {sorted(ours)}")
        report = VerifyReport(*shown, skipped=skipped)
        if not arrays:  # groups of every source form: stores, files, several files combined, Icechunk
            from zopt.readback.verify_nodes import consolidated_differences, group_differences

            report.nodes = group_differences(source, output, job_id) + consolidated_differences(dst_open)
        tasks, owners = [], []
        for name in names:
            check = ArrayCheck(name)
            report.checks.append(check)
            if name not in ours or name not in theirs:
                check.problem = "not in dst" if name not in ours else "not in the source"
                continue
            s, d = theirs[name], ours[name]
            check.metadata = _compare_metadata(s, d)
            if bounds and name in bounds:
                d.lossy = stated_record(bounds[name], d.lossy)
            elif d.lossy is not None:
                check.metadata += record_problems(d.lossy)
            check.kind = kind_of(d.lossy)
            if d.lossy is not None:
                check.bound, check.keepbits = bound_text(d.lossy)
            elif name in source.repacks:  # several files packed differently: not the files' own CF float decoding
                check.kind, check.bound = "re-expressed", "exact decimals p·scale+offset"
            if s.shape != d.shape or s.dtype != d.dtype:
                continue  # values of other shapes or types are not compared
            sentinels: tuple[Any, ...] = ()
            if d.lossy is not None:
                from zopt.lossy.rounding import sentinels_of

                sentinels = sentinels_of(d.dtype, d.zarr_fill, {"missing_value": list(d.lossy.get("sentinels", []))})
            assert d.inner is not None and d.unit is not None  # a Zarr array's (dst is a Zarr store)
            compared = _ArrayCompare(name, d.inner, d.lossy, sentinels, limit)
            for region in regions(d.shape, d.unit):
                tasks.append(dask.delayed(_compare_unit, pure=False)(source, output, compared, region, job_id))
                owners.append(check)
        results = compute(tasks, scheduler, progress, job_id)
    finally:
        release_job(job_id)  # this process's (local schedulers); workers release their own
    _collect(report, owners, results, ours, limit)
    return report


def _collect(report: VerifyReport, owners: list[ArrayCheck], results: list[dict[str, Any]],
             metas: dict[str, ArrayMeta], limit: int) -> None:
    counts: dict[str, Any] = {}
    kept: dict[str, list[float]] = {}
    for check, r in zip(owners, results, strict=True):
        check.elements += r["n"]
        check.violations += r["viol"]
        check.special_mismatches += r["spec"]
        check.max_abs_error = max(check.max_abs_error, r["abs"])
        check.max_rel_error = max(check.max_rel_error, r["rel"])
        check.chunks += r["chunks"]
        check.differing_chunks += r["differing"]
        check.first_differences.extend(r["first"])
        if r.get("problem"):
            check.problem = r["problem"]
        if "kept" in r:
            acc = kept.setdefault(check.name, [0.0, 0])
            acc[0] += r["kept"][0]
            acc[1] += r["kept"][1]
        if r["counts"] is not None:
            counts[check.name] = r["counts"] if check.name not in counts else counts[check.name] + r["counts"]
    for check in report.checks:
        check.first_differences = sorted(check.first_differences, key=lambda c: c.coords)[:limit]
        if check.name in kept:
            w, n = kept[check.name]
            check.information_kept = w / n if n else None
        elif check.name in counts:
            lossy = metas[check.name].lossy or {}  # counts come from lossy records only
            k = int(lossy.get("keepbits", lossy.get("keepbits_min", 0)))
            share = information_kept(counts[check.name], metas[check.name].dtype, k)
            check.information_kept = None if share is None or math.isnan(share) else share
