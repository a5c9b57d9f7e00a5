"""xarray helpers: the ``to_zarr`` encoding for zopt's codec chains, and a notebook ``recompress``.

``encoding(ds, chunks=..., shards=..., preset=..., plan=...)`` returns the ``encoding`` argument
of ``Dataset.to_zarr(..., zarr_format=3)``: per data variable ``chunks`` (the inner chunks),
``shards``, ``serializer``, ``compressors`` (the preset's ``conditional`` codec, with the
decision attached) and ``filters``; ``shuffle`` gets the element size of the dtype xarray
writes (``var.encoding["dtype"]`` when CF packing applies, else the variable's dtype); every
coordinate is one chunk. What it writes is read by plain ``xarray.open_zarr`` in any process
where zopt is installed, without importing zopt.

``recompress(ds_or_path, dst, ...)`` rewrites a file or store with ``zopt.job.recompress``
(a path), or writes an in-memory/dask ``Dataset`` with ``to_zarr`` and this encoding (a
``Dataset``), publishing ``dst`` by atomic rename in both cases.

Importing this module registers the ``ds.zopt`` accessor (xarray's convention for third-party
packages: ``xarray.register_dataset_accessor``): ``ds.zopt.encoding(...)`` and
``ds.zopt.to_zarr(store, ...)``.
"""

from __future__ import annotations

import copy
import os
import shutil
import warnings
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
import xarray as xr

from zopt.io import paths
from zopt.job.reports import RecompressReport
from zopt.planning.chains import split_chain
from zopt.planning.chunking import choose_chunks, parse_shape, shape_for
from zopt.planning.presets import get_preset, set_element_size

__all__ = ["ZoptAccessor", "dask_chunks", "encoding", "recompress"]

#: dtype kinds that get a zopt chain (bool, integers, floats, complex); others keep xarray's defaults
_KINDS = "biufc"
#: encoding keys that change the values or attributes xarray writes (CF packing, time units)
_CF_KEYS = {"dtype", "scale_factor", "add_offset", "_FillValue", "missing_value", "units", "calendar"}


def _written_dtype(var: xr.Variable) -> np.dtype:
    """The dtype ``to_zarr`` stores: the CF-packed ``encoding["dtype"]`` if set, else the variable's."""
    return np.dtype(var.encoding.get("dtype", var.dtype))


def _cf_encoding(var: xr.Variable) -> dict[str, Any]:
    """The variable's CF encoding (packing, fill value, time units): ``to_zarr``'s ``encoding``
    argument replaces ``var.encoding``, so these are carried over to write what xarray would."""
    return {k: v for k, v in var.encoding.items() if k in _CF_KEYS}


def _preset_name(preset: str | None, dtype: np.dtype) -> str:
    if preset is not None:
        return preset
    return "default"  # with the item size: the engine's per-type chain (zopt.planning.menu)


def _plan_chain(ap: Any) -> list[dict[str, Any]]:
    return [{"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "conditional", "configuration": {"codecs": copy.deepcopy(ap.codecs), "header_bits": ap.header_bits}}]


def _load_plan(plan: Any) -> Any:
    if plan is None or not isinstance(plan, str | os.PathLike):
        return plan
    from zopt.planning.plan import Plan

    return Plan.load(plan)


def encoding(
    ds: xr.Dataset,
    chunks: str | tuple[int, ...] | Mapping[str, int] | None = None,
    shards: str | tuple[int, ...] | Mapping[str, int] | None = None,
    preset: str | None = None,
    plan: Any = None,
    decision: Any = None,
    menu: Any = None,
    budget: Any = None,
    readers: Any = None,
) -> dict[Hashable, dict[str, Any]]:
    """The ``encoding`` dict of ``ds.to_zarr(store, zarr_format=3, encoding=...)``.

    Parameters
    ----------
    ds : the Dataset to write.
    chunks, shards : inner chunk and shard shapes as for ``zopt recompress``: by dimension name
        (``{"time": 12}`` or ``"time=12,lat=90"``; other dimensions whole) or positional
        (``(12, 90, 180)``, for variables with that many dimensions). Defaults: ~256 KiB inner
        chunks and ~64 MiB shards (``zopt.planning.chunking.choose_chunks``); an array that fits in one
        inner chunk is not sharded.
    preset : a name from ``zopt.planning.presets`` (``zopt presets``). Default: ``default``, which per
        variable is exactly ``zopt recompress``'s chain for its type (``zopt.planning.menu.default_chain``:
        ``zstd(10)`` for 1-byte and bool, ``shuffle`` + ``zstd(3)`` for the others). ``shuffle``
        is left out for 1-byte types with every preset (it would do nothing there).
    plan : a ``zopt.planning.plan.Plan`` or its path. Its variables get its codecs, inner chunk shape and
        masks (no trial encoding); it is checked against each variable (shape, chunk shape, dtype)
        and raises ``zopt.planning.plan.PlanMismatchError`` listing what differs, or naming the planned
        arrays that are not data variables of ``ds``. Variables it does not cover use the preset.
    decision : overrides the preset's decision for variables without a plan (see
        ``zopt.codecs.decisions``: ``"compress_if_smaller"``, ``"always"``, ``"never"``, a mask …).
    menu, budget, readers : choose each variable's chain from this codec menu instead of the
        preset's (``zopt.planning.candidates``: ``"default"``, ``"archive"`` or candidate names), by trial
        encodings of up to 4 of its chunks (read from ``ds``) within ``budget``
        (``zopt.planning.optimizer``); ``readers`` narrows the menu. Variables that xarray CF-packs to
        another dtype, plan variables and zopt's ML types keep the preset's chain. Not with
        ``preset`` or ``decision`` (ValueError naming ``menu``).

    Returns ``{name: {"chunks", "serializer", "compressors", "filters"[, "shards"]}}`` for every
    data variable of one dimension or more with a numeric or bool dtype, and
    ``{name: {"chunks": shape}}`` for every coordinate of one dimension or more. Raises
    ValueError naming ``preset``, ``chunks``, ``shards`` or ``codecs`` for bad arguments.
    """
    from zopt.codecs.conditional import with_decision_in

    plan = _load_plan(plan)
    chunk_arg = parse_shape(dict(chunks) if isinstance(chunks, Mapping) else chunks, "chunks")
    shard_arg = parse_shape(dict(shards) if isinstance(shards, Mapping) else shards, "shards")
    for label, arg in (("chunks", chunk_arg), ("shards", shard_arg)):  # a misspelt name: refused, not ignored
        unknown = [d for d in arg or () if isinstance(arg, dict) and d not in ds.dims]
        if unknown:
            raise ValueError(f"{label}: the Dataset has no dimension(s) {unknown}; its dimensions are "
                             f"{sorted(map(str, ds.dims))}")
    if preset is not None:
        get_preset(preset)  # a bad name fails even if no variable would use it
    if menu is not None and (preset is not None or decision is not None):
        raise ValueError("menu: it chooses each variable's chain; give menu, or preset/decision, not both")
    if plan is not None:
        from zopt.planning.plan import PlanMismatchError

        missing = sorted(set(plan.arrays) - {str(n) for n in ds.data_vars})
        if missing:
            raise PlanMismatchError(f"plan: it covers {missing}, which are not data variables of the Dataset "
                                    f"(it has {sorted(map(str, ds.data_vars))}); select them or plan these")
    out: dict[Hashable, dict[str, Any]] = {}
    for name, var in ds.data_vars.items():
        dtype = _written_dtype(var.variable)
        if var.ndim == 0 or dtype.kind not in _KINDS:
            continue
        dims, shape = tuple(map(str, var.dims)), tuple(var.shape)
        ap = plan.arrays.get(str(name)) if plan is not None else None
        inner = shape_for(chunk_arg, dims, shape)
        if ap is not None and inner is None:
            inner = tuple(ap.chunk_shape)
        inner, shard = choose_chunks(shape, dtype.itemsize, inner, shape_for(shard_arg, dims, shape))
        if ap is not None:
            ap.check(shape, inner, ap.codecs, ap.header_bits, str(dtype))
            chain = _plan_chain(ap)
            set_element_size(chain, dtype.itemsize)
            split = split_chain(chain)
            split["compressors"] = list(with_decision_in(split["compressors"] or (), ap)) or None
        elif menu is not None and dtype == var.dtype and dtype.kind in "biuf":
            split = _menu_split(var.variable, inner, menu, budget, readers)
        else:
            split = get_preset(_preset_name(preset, dtype)).array_codecs(dtype.itemsize, decision)
        enc = {**_cf_encoding(var.variable), "chunks": inner, "serializer": split["serializer"],
               "compressors": split["compressors"], "filters": split["filters"]}
        fill = var.encoding.get("_FillValue", var.attrs.get("_FillValue"))
        if fill is not None and not (np.asarray(fill).dtype.kind in "fc" and np.isnan(fill)):
            # chunks that are all _FillValue (land, gaps) equal zarr's fill value: not stored
            enc["fill_value"] = np.asarray(fill).astype(dtype)[()]
        if shard is not None:
            enc["shards"] = shard
        out[name] = enc
    for name, coord in ds.coords.items():
        if coord.ndim:
            out[name] = {**_cf_encoding(coord.variable), "chunks": tuple(coord.shape)}
    return out


def _menu_split(var: xr.Variable, inner: tuple[int, ...], menu: Any, budget: Any, readers: Any) -> dict[str, Any]:
    """``filters``/``serializer``/``compressors`` of the chain the menu chooses for ``var``
    (``zopt.planning.optimizer``: trial encodings of up to 4 of its chunks, read from the variable)."""
    from zopt.codecs.conditional import with_decision_in
    from zopt.codecs.grid import padded
    from zopt.planning.candidates import menu_for
    from zopt.planning.optimizer import choose, trial_encode, trial_indices, zarr_data_type

    chains = menu_for(var.dtype, menu, readers)
    chain = next(iter(chains.values()))
    if len(chains) > 1:
        chunks = []
        for index in trial_indices(var.shape, inner, itemsize=var.dtype.itemsize):
            region = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, inner, var.shape, strict=True))
            values = np.ascontiguousarray(var[region].values)
            chunks.append(np.ascontiguousarray(padded(values, inner, np.zeros((), var.dtype))))
        zero = np.zeros((), var.dtype)
        chain = choose(trial_encode(chunks, chains, zarr_data_type(var.dtype), zero), chains, budget).chain
    set_element_size(chain, var.dtype.itemsize)
    split = split_chain(chain)
    split["compressors"] = list(with_decision_in(split["compressors"] or (), "compress_if_smaller")) or None
    return split


def dask_chunks(ds: xr.Dataset, enc: Mapping[Hashable, Mapping[str, Any]]) -> xr.Dataset:
    """``ds`` with each encoded data variable rechunked by Dask to its shards (its inner chunks
    when unsharded), so that each Dask task writes whole shards (``to_zarr`` refuses dask chunks
    that would split a shard between tasks), and dask-backed coordinates in one piece. Returns a
    new Dataset; ``ds`` is unchanged."""
    out = ds.copy()
    for name, e in enc.items():
        if name in ds.data_vars and "serializer" in e:
            out[name] = ds[name].chunk(dict(zip(ds[name].dims, e.get("shards") or e["chunks"], strict=True)))
    for name, coord in ds.coords.items():
        if coord.chunks is not None:
            out.coords[name] = coord.chunk(-1)
    return out


def recompress(
    ds_or_path: xr.Dataset | str | os.PathLike,
    dst: str | os.PathLike,
    *,
    chunks: Any = None,
    shards: Any = None,
    preset: str | None = None,
    plan: Any = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    **engine_options: Any,
) -> RecompressReport | xr.Dataset:
    """Write ``ds_or_path`` to a new Zarr v3 store ``dst`` with a preset's chain.

    A path (netCDF file, Zarr v2/v3 store) goes to ``zopt.recompress`` (one Dask task per
    shard, ``engine_options`` passed on: ``variables``, ``layout``, ``max_memory``, ``menu``,
    ``budget`` …) and its ``RecompressReport`` is returned; without a preset, or with
    ``default``/``archive``, the engine chooses each variable's chain from the preset's codec
    menu (``zopt.planning.candidates``). A ``Dataset`` is written as it is in memory (or as its dask
    graph computes it) by ``ds.to_zarr`` with ``encoding(ds, ...)``, rechunked to whole shards
    per task, under ``dst + ".zopt-partial"`` renamed to ``dst`` at the end; the written store is
    returned opened with ``xarray.open_zarr``. ``dst`` must be a local path for a Dataset.

    Raises FileExistsError if ``dst`` exists and not ``overwrite`` (``zopt.io.paths``: only a Zarr
    store is replaced, atomically); ``zopt.io.paths.OverlapError`` if ``dst`` and the Dataset's
    source file overlap; ValueError for bad options (``engine_options`` for a Dataset are refused
    by name).
    """
    if not isinstance(ds_or_path, xr.Dataset):
        from zopt.job.api import run_job
        from zopt.job.options import RecompressJob

        return run_job(RecompressJob(ds_or_path, dst, chunks=chunks, shards=shards, preset=preset, plan=plan,
                                     scheduler=scheduler, overwrite=overwrite, **engine_options))
    if engine_options:
        raise ValueError(f"{sorted(engine_options)}: not options of a Dataset write; allowed: chunks, shards, preset, "
                         "plan, scheduler, overwrite")
    if "://" in os.fspath(dst):
        raise ValueError(f"dst: {os.fspath(dst)!r}: a Dataset is written to a local directory (use ds.to_zarr for URLs)")
    dst = paths.resolve(dst)
    source = ds_or_path.encoding.get("source")  # the file the Dataset was opened from, if any
    if source:
        paths.check_no_overlap(source, dst)
    paths.check_replaceable(dst, overwrite)
    enc = encoding(ds_or_path, chunks=chunks, shards=shards, preset=preset, plan=plan)
    ds = dask_chunks(ds_or_path, enc)
    for v in ds.variables.values():  # the source's storage encodings (netCDF chunking, zlib) do not apply
        v.encoding = _cf_encoding(v)
    partial = dst + paths.PARTIAL_SUFFIX
    shutil.rmtree(partial, ignore_errors=True)
    try:
        with warnings.catch_warnings():  # zarr warns that consolidation is not in the v3 spec
            warnings.simplefilter("ignore", UserWarning)
            delayed = ds.to_zarr(partial, mode="w", zarr_format=3, consolidated=True, encoding=enc, compute=False)
        from zopt.compat.scheduling import compute

        compute([delayed], scheduler, None)
        paths.publish(partial, dst)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return xr.open_zarr(dst)


@xr.register_dataset_accessor("zopt")
class ZoptAccessor:
    """``ds.zopt``: ``encoding(...)`` (as ``zopt.xarray.encoding``) and ``to_zarr(store, ...)``."""

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    def encoding(self, **options: Any) -> dict[Hashable, dict[str, Any]]:
        """``zopt.xarray.encoding(ds, **options)``."""
        return encoding(self._ds, **options)

    def to_zarr(self, store: Any, *, chunks: Any = None, shards: Any = None, preset: str | None = None,
                plan: Any = None, decision: Any = None, **to_zarr_kwargs: Any) -> Any:
        """``ds.to_zarr(store, zarr_format=3, encoding=zopt.xarray.encoding(ds, ...), **to_zarr_kwargs)``
        with dask-backed variables rechunked to whole shards (``dask_chunks``)."""
        enc = encoding(self._ds, chunks=chunks, shards=shards, preset=preset, plan=plan, decision=decision)
        ds = dask_chunks(self._ds, enc) if any(v.chunks for v in self._ds.data_vars.values()) else self._ds
        if to_zarr_kwargs.setdefault("zarr_format", 3) != 3:
            raise ValueError("zarr_format: zopt's codecs are Zarr v3 codecs; only 3 is allowed")
        return ds.to_zarr(store, encoding=enc, **to_zarr_kwargs)
