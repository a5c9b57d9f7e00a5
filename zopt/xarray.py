"""xarray helpers: the ``to_zarr`` encoding for zopt's codec chains, and a notebook ``recompress``.

``encoding(ds, chunks=..., shards=..., preset=..., plan=..., menu=...)`` returns the ``encoding``
argument of ``Dataset.to_zarr(..., zarr_format=3)``: per numeric variable ``chunks`` (the inner
chunks), ``shards``, ``serializer``, ``compressors`` and ``filters``, chosen as ``zopt recompress``
chooses them for the same data (``zopt.planning.chunking.variable_layout``, and the codec menu's
``zopt.planning.optimizer.choose_chains`` run on the values xarray writes). By default what it
writes opens with plain zarr-python >= 3.1 (numcodecs and pcodec installed), without zopt;
``readers="zopt"``, a decision, a plan or the ``fast``/``lossless-8bit`` presets write zopt's
``conditional`` codec (read where zopt is installed, without importing it).

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
from collections.abc import Callable, Hashable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack

import numpy as np
import xarray as xr

from zopt.errors import OptionError
from zopt.io import paths
from zopt.io.sources import CombinedSource, SourceVariable
from zopt.job.progress import JobProgress, TaskBar
from zopt.job.reports import RecompressReport
from zopt.planning.chains import sized_chain, split_chain
from zopt.planning.chunking import parse_shape
from zopt.planning.presets import get_preset, set_element_size

if TYPE_CHECKING:
    from dask.delayed import Delayed
    from xarray.core.types import ZarrWriteModes
    from zarr.storage import StoreLike

    from zopt.codecs.decisions import DecisionLike
    from zopt.planning.plan import ArrayPlan, Plan
    from zopt.types import BudgetLike, NamesLike, PathLike, ShapeLike

__all__ = ["EncodingOptions", "ToZarrOptions", "ZoptAccessor", "dask_chunks", "encoding", "recompress"]

#: dtype kinds (as written) that get a chain (bool, integers, floats, complex); others keep xarray's defaults
_KINDS = "biufc"
#: encoding keys that change the values or attributes xarray writes (CF packing, time units)
_CF_KEYS = {"dtype", "scale_factor", "add_offset", "_FillValue", "missing_value", "units", "calendar"}


def _cf_encoding(var: xr.Variable) -> dict[str, Any]:
    """The variable's CF encoding (packing, fill value, time units): ``to_zarr``'s ``encoding``
    argument replaces ``var.encoding``, so these are carried over to write what xarray would."""
    return {k: v for k, v in var.encoding.items() if k in _CF_KEYS}


def _plan_chain(ap: ArrayPlan) -> list[dict[str, Any]]:
    return [{"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "conditional", "configuration": {"codecs": copy.deepcopy(ap.codecs), "header_bits": ap.header_bits}}]


def _load_plan(plan: Plan | PathLike | None) -> Plan | None:
    if plan is None or not isinstance(plan, str | os.PathLike):
        return plan
    from zopt.planning.plan import Plan

    return Plan.load(plan)


class _DatasetSource(CombinedSource):
    """An in-memory (or dask-backed) Dataset as a source of ``zopt.io.sources.read_source``: each
    variable as ``to_zarr`` stores it (CF-encoded with the CF keys of its ``encoding``: packed
    integers, encoded times, bools as int8), so the codec menu's trial chunks
    (``zopt.planning.optimizer.choose_chains``, the function ``zopt recompress`` runs) are the
    values written."""

    def __init__(self, ds: xr.Dataset) -> None:
        self.text = "the Dataset"
        self._encoded: dict[str, xr.Variable] = {}
        for name, var in ds.variables.items():
            if var.ndim == 0 or var.dtype.kind not in _KINDS + "MmO":  # O: cftime dates (and strings, left below)
                continue
            v = var.variable.copy(deep=False) if hasattr(var, "variable") else var.copy(deep=False)
            v.encoding = _cf_encoding(var)
            enc = xr.conventions.encode_cf_variable(v, name=name)
            if enc.dtype.kind in _KINDS:
                self._encoded[str(name)] = enc

    def variables(self, job_id: str | None = None) -> dict[str, SourceVariable]:
        return {n: SourceVariable(tuple(v.shape), v.dtype, tuple(map(str, v.dims))) for n, v in self._encoded.items()}

    def read(self, name: str, region: tuple[slice, ...], job_id: str | None = None) -> np.ndarray:
        return np.asarray(self._encoded[name][region].values)

    def template(self, job_id: str | None = None) -> xr.Dataset:  # pragma: no cover - a job's, not encoding's
        raise NotImplementedError


def encoding(
    ds: xr.Dataset,
    chunks: ShapeLike = None,
    shards: ShapeLike = None,
    preset: str | None = None,
    plan: Plan | PathLike | None = None,
    decision: DecisionLike = None,
    menu: str | Sequence[str] | None = None,
    budget: BudgetLike = None,
    readers: NamesLike = None,
) -> dict[Hashable, dict[str, Any]]:
    """The ``encoding`` dict of ``ds.to_zarr(store, zarr_format=3, encoding=...)``: the chunks,
    shards and chains ``zopt recompress`` would write for the same data.

    Parameters
    ----------
    ds : the Dataset to write.
    chunks, shards : inner chunk and shard shapes as for ``zopt recompress``: by dimension name
        (``{"time": 12}`` or ``"time=12,lat=90"``; other dimensions whole) or positional
        (``(12, 90, 180)``, for variables with that many dimensions). Defaults and 1-D
        coordinates (whole) as ``recompress`` chooses them (``zopt.planning.chunking.variable_layout``:
        ~256 KiB inner chunks, ~64 MiB shards; an array that fits in one inner chunk is not sharded).
    preset : a name from ``zopt.planning.presets`` (``zopt presets``). ``default`` (no preset) and
        ``archive`` choose each variable's chain from their codec menu, as ``recompress`` does;
        ``fast`` and ``lossless-8bit`` write their chain (zopt's ``conditional``) for every variable.
    plan : a ``zopt.planning.plan.Plan`` or its path. Its variables get its codecs, inner chunk shape and
        masks (no trial encoding); it is checked against each variable (shape, chunk shape, dtype)
        and raises ``zopt.planning.plan.PlanMismatchError`` listing what differs, or naming the planned
        arrays that are not data variables of ``ds``. Variables it does not cover use the menu.
    decision : the ``conditional`` codec's decision (``zopt.codecs.decisions``: ``"compress_if_smaller"``,
        ``"always"``, ``"never"``, a mask …): overrides a chain preset's; without one, the menu is
        kept to chains with a ``conditional`` mask, which only zopt reads (readers ``zopt``).
    menu, budget, readers : the codec menu each variable's chain is chosen from
        (``zopt.planning.candidates``: ``"default"``, ``"archive"`` or candidate names; default the
        preset's, else ``"default"``), by trial encodings of up to 4 of its chunks read from ``ds``
        as written, within ``budget`` (``zopt.planning.optimizer.choose_chains``, the function
        ``recompress`` runs); ``readers`` (``zopt.planning.readers``; default plain zarr-python
        for a named menu, so the store opens without zopt; candidates named one by one are taken
        as asked) narrows the menu. Not with a chain preset (ValueError naming ``menu``).

    Returns ``{name: {"chunks", "serializer", "compressors", "filters"[, "shards"][, "fill_value"]}}``
    (plus the variable's CF keys) for every variable (data variables and coordinates) of one
    dimension or more with a numeric or bool dtype as xarray writes it. Raises ValueError naming
    ``preset``, ``chunks``, ``shards``, ``menu``, ``readers`` or ``codecs`` for bad arguments.
    """
    from zopt.planning.chunking import variable_layout
    from zopt.planning.optimizer import MenuOptions

    plan = _load_plan(plan)
    chunk_arg = parse_shape(dict(chunks) if isinstance(chunks, Mapping) else chunks, "chunks")
    shard_arg = parse_shape(dict(shards) if isinstance(shards, Mapping) else shards, "shards")
    for label, arg in (("chunks", chunk_arg), ("shards", shard_arg)):  # a misspelt name: refused, not ignored
        unknown = [d for d in arg or () if isinstance(arg, dict) and d not in ds.dims]
        if unknown:
            raise OptionError(label, f"the Dataset has no dimension(s) {unknown}; its dimensions are "
                             f"{sorted(map(str, ds.dims))}")
    chosen_preset = get_preset(preset) if preset is not None else None  # a bad name fails even if unused
    chain_preset = chosen_preset if chosen_preset is not None and chosen_preset.menu is None else None
    if chain_preset is not None and (menu is not None or budget is not None):
        raise OptionError("menu", f"preset {preset!r} names a chain; give menu/budget, or that preset, not both")
    if menu is None and chosen_preset is not None:
        menu, budget = chosen_preset.menu, chosen_preset.budget if budget is None else budget
    explicit = decision is not None and not (isinstance(decision, str) and decision == "compress_if_smaller")
    options = MenuOptions.parse(menu, budget, readers, decision_given=explicit and chain_preset is None)
    if plan is not None:
        from zopt.planning.plan import PlanMismatchError

        missing = sorted(set(plan.arrays) - {str(n) for n in ds.data_vars})
        if missing:
            raise PlanMismatchError(f"plan: it covers {missing}, which are not data variables of the Dataset "
                                    f"(it has {sorted(map(str, ds.data_vars))}); select them or plan these")
    source = _DatasetSource(ds)
    variables = source.variables()
    layouts = {n: variable_layout(n, v, chunk_arg, shard_arg, plan if chunks is None else None)
               for n, v in variables.items()}
    splits = {}
    for name, (inner, _) in layouts.items():
        ap = plan.arrays.get(name) if plan is not None else None
        if ap is not None:
            ap.check(variables[name].shape, inner, ap.codecs, ap.header_bits, str(variables[name].dtype))
            chain = _plan_chain(ap)
            set_element_size(chain, variables[name].dtype.itemsize)
            splits[name] = _with_decision(split_chain(chain), ap)
        elif chain_preset is not None:
            splits[name] = chain_preset.array_codecs(variables[name].dtype.itemsize, decision)
    todo = {n: v for n, v in variables.items() if n not in splits}
    if todo:
        import uuid

        from zopt.planning.optimizer import choose_chains

        choices = choose_chains(source, todo, layouts, options, job_id=uuid.uuid4().hex[:12])
        for name, choice in choices.items():
            chain = sized_chain(choice.chain, variables[name].dtype)
            set_element_size(chain, variables[name].dtype.itemsize)
            splits[name] = _with_decision(split_chain(chain), decision if explicit else "compress_if_smaller")
    out: dict[Hashable, dict[str, Any]] = {}
    for key, var in ds.variables.items():
        if str(key) not in splits:
            continue
        inner, shard = layouts[str(key)]
        split = splits[str(key)]
        enc = {**_cf_encoding(var), "chunks": inner, "serializer": split["serializer"],
               "compressors": split["compressors"], "filters": split["filters"]}
        fill = var.encoding.get("_FillValue", var.attrs.get("_FillValue"))
        if fill is not None and not (np.asarray(fill).dtype.kind in "fc" and np.isnan(fill)):
            # chunks that are all _FillValue (land, gaps) equal zarr's fill value: not stored
            enc["fill_value"] = np.asarray(fill).astype(variables[str(key)].dtype)[()]
        if shard is not None:
            enc["shards"] = shard
        out[key] = enc
    return out


def _with_decision(split: dict[str, Any], decision: DecisionLike) -> dict[str, Any]:
    """``split`` with ``decision`` attached to its ``conditional`` codecs (decisions are runtime objects)."""
    from zopt.codecs.conditional import with_decision_in

    return {**split, "compressors": list(with_decision_in(split["compressors"] or (), decision)) or None}


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
    ds_or_path: xr.Dataset | PathLike,
    dst: PathLike,
    *,
    chunks: ShapeLike = None,
    shards: ShapeLike = None,
    preset: str | None = None,
    plan: Plan | PathLike | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    progress: object = None,
    **engine_options: object,
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

    ``progress``: as ``zopt.recompress``'s (None: a display on a terminal or in a notebook; False:
    nothing; or a function called with each ``zopt.job.progress.ProgressEvent``); a Dataset's
    write counts the tasks of its Dask graph (phase ``"writing"``, what ``"tasks"``).

    Raises FileExistsError if ``dst`` exists and not ``overwrite`` (``zopt.io.paths``: only a Zarr
    store is replaced, atomically); ``zopt.io.paths.OverlapError`` if ``dst`` and the Dataset's
    source file overlap; ValueError for bad options (``engine_options`` for a Dataset are refused
    by name).
    """
    if not isinstance(ds_or_path, xr.Dataset):
        from zopt.job.api import run_job
        from zopt.job.options import RecompressJob

        return run_job(RecompressJob.parse(ds_or_path, dst, chunks=chunks, shards=shards, preset=preset, plan=plan,
                                     scheduler=scheduler, overwrite=overwrite, progress=progress,
                                     **engine_options))
    if engine_options:
        raise OptionError(sorted(engine_options)[0], label=f"{sorted(engine_options)}", message="not options of a Dataset write; allowed: chunks, shards, preset, "
                         "plan, scheduler, overwrite")
    if "://" in os.fspath(dst):
        raise OptionError("dst", f"{os.fspath(dst)!r}: a Dataset is written to a local directory (use ds.to_zarr for URLs)")
    from zopt.job.progress import parse_progress

    shown = parse_progress(progress)
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

        try:
            compute([delayed], scheduler, None if shown is None else _graph_bar(shown, delayed, ds.nbytes))
        finally:
            if shown is not None:
                shown.close()
        paths.publish(partial, dst)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return xr.open_zarr(dst)


def _graph_bar(shown: JobProgress, delayed: Delayed, nbytes: int) -> Callable[[int], TaskBar]:
    """``compute``'s progress factory for a Dataset's ``to_zarr`` graph: every task of the graph counts
    (the local schedulers' callbacks; a cluster moves it once, at the end)."""
    keys = frozenset(str(k) for k in delayed.__dask_graph__())

    class _Graph(TaskBar):
        def watch_keys(self, _final: frozenset[str]) -> None:
            self.keys = keys

        def advance(self, n: int = 1) -> None:  # a cluster's one future: the whole graph
            self.step(self.total - self.done)

        def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                     tb: TracebackType | None) -> None:
            super().__exit__(exc_type, exc, tb)
            if exc_type is None and self.done < self.total:  # tasks Dask fused into others
                self.step(self.total - self.done)

    return lambda _n: _Graph(shown, "writing", "tasks", len(keys), nbytes)


class EncodingOptions(TypedDict, total=False):
    """``encoding``'s keyword options (``ds.zopt.encoding(**options)``), each described there."""

    chunks: ShapeLike
    shards: ShapeLike
    preset: str | None
    plan: Plan | PathLike | None
    decision: DecisionLike
    menu: str | Sequence[str] | None
    budget: BudgetLike
    readers: NamesLike


class ToZarrOptions(TypedDict, total=False):
    """``xarray.Dataset.to_zarr``'s keywords that ``ds.zopt.to_zarr`` passes on (``encoding`` is
    zopt's, ``compute`` its own keyword; ``zarr_format`` may only be 3)."""

    mode: ZarrWriteModes | None
    group: str | None
    consolidated: bool | None
    append_dim: Hashable | None
    region: Mapping[str, slice | Literal["auto"]] | Literal["auto"] | None
    safe_chunks: bool
    align_chunks: bool
    storage_options: dict[str, str] | None
    zarr_format: int | None
    write_empty_chunks: bool | None
    chunkmanager_store_kwargs: dict[str, Any] | None


@xr.register_dataset_accessor("zopt")
class ZoptAccessor:
    """``ds.zopt``: ``encoding(...)`` (as ``zopt.xarray.encoding``) and ``to_zarr(store, ...)``."""

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    def encoding(self, **options: Unpack[EncodingOptions]) -> dict[Hashable, dict[str, Any]]:
        """``zopt.xarray.encoding(ds, **options)``."""
        return encoding(self._ds, **options)

    def to_zarr(self, store: StoreLike, *, chunks: ShapeLike = None, shards: ShapeLike = None,
                preset: str | None = None, plan: Plan | PathLike | None = None, decision: DecisionLike = None,
                menu: str | Sequence[str] | None = None, budget: BudgetLike = None, readers: NamesLike = None,
                compute: bool = True, **to_zarr_kwargs: Unpack[ToZarrOptions]) -> Any:
        """``ds.to_zarr(store, zarr_format=3, encoding=zopt.xarray.encoding(ds, ...), **to_zarr_kwargs)``
        with dask-backed variables rechunked to whole shards (``dask_chunks``), so that no two Dask
        tasks write into one shard (xarray's ``safe_chunks=False`` lets them, and a shard written
        by two tasks at once loses one task's chunks: docs/xarray.md). Peak memory: about one
        shard, its input pieces and its encoded bytes per Dask worker thread."""
        enc = encoding(self._ds, chunks=chunks, shards=shards, preset=preset, plan=plan, decision=decision, menu=menu,
                       budget=budget, readers=readers)
        ds = dask_chunks(self._ds, enc) if any(v.chunks for v in self._ds.variables.values()) else self._ds
        if to_zarr_kwargs.setdefault("zarr_format", 3) != 3:
            raise OptionError("zarr_format", "zopt's codecs are Zarr v3 codecs; only 3 is allowed")
        if compute:  # (xarray's overloads tell the two results apart by compute's literal value)
            return ds.to_zarr(store, encoding=enc, compute=True, **to_zarr_kwargs)
        return ds.to_zarr(store, encoding=enc, compute=False, **to_zarr_kwargs)
