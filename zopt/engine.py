"""The recompress engine: a Dask graph with one task per output shard.

``recompress(src, dst)`` copies every variable of a Zarr v2/v3 store or netCDF file into a new
Zarr v3 store whose arrays use a target codec chain — by default ``bytes`` +
``conditional([shuffle, zstd])`` deciding ``compress_if_smaller`` per inner chunk.

How the work is split:

- The source is opened with xarray without CF decoding, so values are copied bit for bit and
  CF attributes (``_FillValue``, ``scale_factor``, ``units`` …) travel as they are; xarray writes
  the destination's metadata (attributes, dimension names, coordinates, fill values), exactly
  as ``Dataset.to_zarr`` would, so ``xarray.open_zarr(dst)`` equals ``xarray.open_dataset(src)``.
- Every variable of one dimension or more is written by Dask tasks, one per output shard (per
  chunk when unsharded). Each task opens the source lazily and reads only its shard's region,
  opens the destination array, attaches the decision to its ``conditional`` codecs (decisions
  are runtime objects and do not survive pickling of sharded arrays), and writes the region
  through zarr, so the result is an ordinary Zarr v3 store.
- The store is written under ``<dst>.zopt-partial`` and renamed to ``dst`` when every task has
  finished; a failed run removes the partial store, and an interrupted one leaves only that
  clearly named directory. The source is only read.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import math
import os
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xarray as xr
import zarr

from zopt.codecs.conditional import conditional_codecs_in, with_decision_in
from zopt.decisions import Decision

__all__ = [
    "ArrayReport",
    "DEFAULT_CHAIN",
    "RecompressReport",
    "open_source",
    "recompress",
    "with_decision",
]

#: the default target chain: raw bytes, then shuffle+zstd where they make the chunk smaller
DEFAULT_CHAIN: list[dict[str, Any]] = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {
        "name": "conditional",
        "configuration": {"codecs": [{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}]},
    },
]
PARTIAL_SUFFIX = ".zopt-partial"


# -- reports ---------------------------------------------------------------------------------------


@dataclass
class ArrayReport:
    """What the rewrite of one array did. Sizes in bytes, time in seconds."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    chunks: int  # inner chunks in the grid
    chunks_written: int  # inner chunks stored (the rest equal the fill value)
    logical_bytes: int
    stored_before: int | None
    stored_after: int = 0
    masks: collections.Counter = field(default_factory=collections.Counter)
    seconds: float = 0.0

    @property
    def ratio(self) -> float:
        return self.logical_bytes / self.stored_after if self.stored_after else math.inf


@dataclass
class RecompressReport:
    """Per-array reports plus wall time (seconds) and the destination path."""

    dst: str
    arrays: list[ArrayReport]
    seconds: float
    source_bytes: int | None = None

    @property
    def logical_bytes(self) -> int:
        return sum(a.logical_bytes for a in self.arrays)

    @property
    def stored_after(self) -> int:
        return sum(a.stored_after for a in self.arrays)

    @property
    def mb_per_s(self) -> float:
        return self.logical_bytes / 1e6 / self.seconds if self.seconds else math.inf

    def masks(self) -> collections.Counter:
        total: collections.Counter = collections.Counter()
        for a in self.arrays:
            total.update(a.masks)
        return total


# -- sources ----------------------------------------------------------------------------------------


def _is_zarr(path: str) -> bool:
    p = Path(path)
    return p.is_dir() and any((p / name).exists() for name in ("zarr.json", ".zgroup", ".zarray", ".zmetadata"))


@functools.lru_cache(maxsize=8)
def open_source(src: str) -> xr.Dataset:
    """Open ``src`` (Zarr v2/v3 store or netCDF/HDF5 file) lazily, without CF decoding.

    Cached per process, so the tasks running in one worker share one open file.
    Raises FileNotFoundError if ``src`` does not exist.
    """
    if not os.path.exists(src):
        raise FileNotFoundError(f"source {src!r} does not exist")
    kwargs: dict[str, Any] = {"decode_cf": False, "mask_and_scale": False, "decode_times": False, "chunks": None}
    if _is_zarr(src):
        return xr.open_dataset(src, engine="zarr", consolidated=None, **kwargs)
    return xr.open_dataset(src, **kwargs)


def _source_nbytes(src: str) -> int:
    p = Path(src)
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return p.stat().st_size


def chunk_bytes_stored(store: str, name: str) -> int:
    """Bytes of chunk (or shard) files of array ``name`` in a local store, metadata excluded."""
    root = Path(store) / name
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f not in ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"):
                total += os.path.getsize(os.path.join(dirpath, f))
    return total


def _stored_bytes_of(src: str, name: str) -> int | None:
    return chunk_bytes_stored(src, name) if _is_zarr(src) else None


# -- codec chain and chunking -----------------------------------------------------------------------


def parse_chain(chain: Sequence[dict[str, Any]] | str | None) -> list[dict[str, Any]]:
    """The target codec chain as a list of codec JSON objects (a JSON string is parsed).

    Raises ValueError naming ``codecs`` if it is not a list of codec objects.
    """
    if chain is None:
        return json.loads(json.dumps(DEFAULT_CHAIN))
    if isinstance(chain, str):
        try:
            chain = json.loads(chain)
        except json.JSONDecodeError as exc:
            raise ValueError(f"codecs: not valid JSON: {exc}") from exc
    if not isinstance(chain, list) or not all(isinstance(c, dict) and "name" in c for c in chain):
        raise ValueError(
            "codecs: expected a JSON list of codec objects such as "
            '[{"name": "bytes"}, {"name": "conditional", "configuration": {"codecs": [...]}}]'
        )
    return chain


def _split_chain(chain: list[dict[str, Any]]) -> dict[str, Any]:
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
    from zarr.registry import _resolve_codec

    filters, serializer, compressors = [], None, []
    for i, c in enumerate(chain):
        try:
            codec = _resolve_codec(c)
        except KeyError as exc:
            raise ValueError(f"codecs[{i}]: unknown codec {c['name']!r}") from exc
        except (ValueError, TypeError) as exc:
            raise ValueError(f"codecs[{i}]: {exc}") from exc
        if isinstance(codec, ArrayArrayCodec):
            filters.append(codec)
        elif isinstance(codec, ArrayBytesCodec):
            if serializer is not None:
                raise ValueError("codecs: the chain has more than one array→bytes codec")
            serializer = codec
        elif isinstance(codec, BytesBytesCodec):
            compressors.append(codec)
    if serializer is None:
        raise ValueError("codecs: the chain needs an array→bytes codec such as 'bytes'")
    return {"filters": filters or None, "serializer": serializer, "compressors": compressors or None}


ShapeSpec = tuple[int, ...] | dict[str, int] | None


def parse_shape(text: str | Sequence[int] | dict[str, int] | None, label: str = "chunks") -> ShapeSpec:
    """Parse a chunk or shard shape.

    ``"1,32,32"`` → ``(1, 32, 32)`` (for variables with that many dimensions);
    ``"y=32,x=32"`` → ``{"y": 32, "x": 32}`` (by dimension name; other dimensions whole).
    Raises ValueError naming ``label`` and the bad entry.
    """
    if text is None:
        return None
    if isinstance(text, dict):
        items = list(text.items())
    elif isinstance(text, tuple | list):
        items = [(None, x) for x in text]
    else:
        items = [tuple(p.split("=", 1)) if "=" in p else (None, p) for p in str(text).split(",")]
    named = {k is not None for k, _ in items}
    if len(named) > 1:
        raise ValueError(f"{label}: {text!r} mixes named (dim=size) and positional sizes")
    try:
        sizes = [int(v) for _, v in items]
    except ValueError as exc:
        raise ValueError(f"{label}: {text!r}: sizes must be positive integers") from exc
    if any(v < 1 for v in sizes):
        raise ValueError(f"{label}: {text!r}: sizes must be positive integers")
    if named == {True}:
        return {str(k).strip(): v for (k, _), v in zip(items, sizes, strict=True)}
    return tuple(sizes)


def shape_for(spec: ShapeSpec, dims: tuple[str, ...], shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Resolve a parsed shape for one variable; None when the spec does not apply to it."""
    if spec is None:
        return None
    if isinstance(spec, dict):
        if not set(spec) & set(dims):
            return None
        return tuple(spec.get(d, s) for d, s in zip(dims, shape, strict=True))
    return spec if len(spec) == len(shape) else None


def _fit(shape: tuple[int, ...], target_elems: int) -> tuple[int, ...]:
    """A chunk shape of about ``target_elems`` elements, filling the last dimensions first."""
    out = []
    remaining = max(1, target_elems)
    for s in reversed(shape):
        take = max(1, min(s, remaining))
        out.append(take)
        remaining = max(1, remaining // take)
    return tuple(reversed(out))


def choose_chunks(
    shape: tuple[int, ...],
    itemsize: int,
    chunks: tuple[int, ...] | None,
    shards: tuple[int, ...] | None,
    inner_bytes: int = 256 * 1024,
    shard_bytes: int = 64 * 1024 * 1024,
) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """Inner chunk and shard shapes for an array (shard None: unsharded).

    Given shapes are clipped to the array; a shard shape is rounded down to a multiple of the
    inner chunk shape. Defaults: ~256 KiB inner chunks, ~64 MiB shards.
    Raises ValueError when the number of dimensions does not match.
    """
    ndim = len(shape)
    for label, given in (("chunks", chunks), ("shards", shards)):
        if given is not None and len(given) != ndim:
            raise ValueError(f"{label}: {given} has {len(given)} entries, the array has {ndim} dimensions")
    if chunks is None:
        chunks = _fit(shape, inner_bytes // itemsize)
    chunks = tuple(max(1, min(c, s)) for c, s in zip(chunks, shape, strict=True))
    if shards is None:
        n_inner = max(1, shard_bytes // (itemsize * math.prod(chunks)))
        per = _fit(tuple(math.ceil(s / c) for s, c in zip(shape, chunks, strict=True)), n_inner)
        shards = tuple(p * c for p, c in zip(per, chunks, strict=True))
    shards = tuple(max(c, (min(sh, math.ceil(s / c) * c) // c) * c) for sh, c, s in zip(shards, chunks, shape, strict=True))
    if shards == chunks or all(c >= s for c, s in zip(chunks, shape, strict=True)):
        return chunks, None
    return chunks, shards


# -- decisions on opened arrays ----------------------------------------------------------------------


def with_decision(array: zarr.Array, decision: Any, trial_encode: bool | None = None) -> zarr.Array:
    """The same array, with ``decision`` attached to all its ``conditional`` codecs.

    Use this to write with a decision into an array opened from a store (decisions are runtime
    objects and are not stored). Raises ValueError if the array has no conditional codec.
    """
    from dataclasses import replace

    from zarr.core.array import AsyncArray

    meta = array.metadata
    if not conditional_codecs_in(meta.codecs):
        raise ValueError(f"array {array.path!r} has no conditional codec to attach a decision to")
    new_meta = replace(meta, codecs=with_decision_in(meta.codecs, decision, trial_encode))
    aa = array._async_array
    return zarr.Array(AsyncArray(metadata=new_meta, store_path=aa.store_path, config=aa.config))


@dataclass
class _Recorder(Decision):
    """Wraps a decision and records each chunk's mask and payload size (bytes)."""

    inner: Decision | None
    log: list = field(default_factory=list)

    @property
    def needs_chunk_index(self) -> bool:  # type: ignore[override]
        return bool(self.inner and self.inner.needs_chunk_index)

    def choose(self, chunk_index, codecs, data, run):
        if self.inner is None:
            mask, payload = 0, data
        else:
            mask, payload = self.inner.choose(chunk_index, codecs, data, run)
        self.log.append((chunk_index, mask, int(payload.size)))
        return mask, payload


# -- tasks ------------------------------------------------------------------------------------------


def _write_region(
    src: str, name: str, dst: str, region: tuple[slice, ...], decision: Any
) -> tuple[collections.Counter, int]:
    """Dask task: copy one shard-aligned region of variable ``name``; returns (mask counts, chunks)."""
    data = open_source(src)[name].variable[region].values
    array = zarr.open_array(dst, path=name, mode="r+")
    conditional = conditional_codecs_in(array.metadata.codecs)
    recorder = None
    if conditional:
        resolved = conditional[0].with_decision(decision).decision
        recorder = _Recorder(resolved)
        array = with_decision(array, recorder)
    array[region] = data
    masks: collections.Counter = collections.Counter()
    if recorder is not None:
        masks.update(mask for _, mask, _ in recorder.log)
    return masks, len(recorder.log) if recorder else 0


def _regions(shape: tuple[int, ...], step: tuple[int, ...]) -> list[tuple[slice, ...]]:
    ranges = [range(0, s, k) for s, k in zip(shape, step, strict=True)]
    return [tuple(slice(o, min(o + k, s)) for o, k, s in zip(origin, step, shape, strict=True)) for origin in itertools.product(*ranges)]


# -- the job ----------------------------------------------------------------------------------------


def recompress(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    codecs: Sequence[dict[str, Any]] | str | None = None,
    chunks: tuple[int, ...] | str | None = None,
    shards: tuple[int, ...] | str | None = None,
    decision: Any = "compress_if_smaller",
    variables: Sequence[str] | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    progress: Callable[[Any], Any] | None = None,
) -> RecompressReport:
    """Rewrite ``src`` into a new Zarr v3 store ``dst`` with the target codec chain.

    Parameters
    ----------
    src : path of a Zarr v2/v3 store or a netCDF/HDF5 file. Only read.
    dst : path of the new Zarr v3 store (local directory).
    codecs : target codec chain (list of codec JSON objects or a JSON string); inside
        ``sharding_indexed`` when sharded. Default ``DEFAULT_CHAIN``.
    chunks, shards : inner chunk and shard shapes: by dimension name (``"y=32,x=32"`` or a dict;
        unnamed dimensions whole, for every variable having one of the names) or positional
        (``"1,32,32"``, for every variable with that many dimensions). Defaults: ~256 KiB inner
        chunks, ~64 MiB shards; shards are rounded down to a multiple of the inner chunks.
    decision : how ``conditional`` codecs pick masks (see ``zopt.decisions``).
    variables : names to rewrite (default all); the others are still copied unchanged.
    scheduler : None for Dask's local threaded scheduler, ``"processes"``/``"synchronous"``, or a
        ``dask.distributed`` scheduler address (``tcp://host:8786``).
    overwrite : replace an existing ``dst``.
    progress : a context-manager factory wrapping the compute (e.g. a progress bar).

    Returns a ``RecompressReport``. Raises FileExistsError if ``dst`` exists and not
    ``overwrite``; ValueError for a bad codec chain or shape. On any error the partial store is
    removed and ``dst`` is left as it was.
    """
    import dask

    src, dst = os.fspath(src), os.fspath(dst)
    if os.path.abspath(src) == os.path.abspath(dst):
        raise ValueError("dst: must differ from src (recompress writes a new store; src is only read)")
    if os.path.exists(dst) and not overwrite:
        raise FileExistsError(f"dst {dst!r} exists; pass overwrite=True (--overwrite) to replace it")
    chain = parse_chain(codecs)
    split = _split_chain(chain)
    chunk_arg = parse_shape(chunks, "chunks")
    shard_arg = parse_shape(shards, "shards")

    t0 = time.perf_counter()
    ds = open_source(src)
    names = list(variables) if variables else [n for n in ds.variables if ds[n].ndim >= 1 and ds[n].dtype.kind in "biufc"]
    missing = [n for n in names if n not in ds.variables]
    if missing:
        raise ValueError(f"variables: {missing} not in the source; it has {sorted(map(str, ds.variables))}")

    partial = dst.rstrip("/") + PARTIAL_SUFFIX
    shutil.rmtree(partial, ignore_errors=True)
    try:
        template, layouts = _template(ds, names, chunk_arg, shard_arg)
        template.to_zarr(partial, mode="w", compute=False, zarr_format=3, consolidated=False, encoding=_encodings(names, split, layouts))
        tasks, reports = [], {}
        for name in names:
            var = ds[name]
            inner, shard = layouts[name]
            reports[name] = ArrayReport(
                name=name,
                shape=tuple(var.shape),
                dtype=str(var.dtype),
                chunks=math.prod(math.ceil(s / c) for s, c in zip(var.shape, inner, strict=True)),
                chunks_written=0,
                logical_bytes=int(var.size * var.dtype.itemsize),
                stored_before=_stored_bytes_of(src, name),
            )
            for region in _regions(tuple(var.shape), shard or inner):
                tasks.append((name, dask.delayed(_write_region, pure=False)(src, name, partial, region, decision)))
        results = _compute([t for _, t in tasks], scheduler, progress)
        for (name, _), (masks, n) in zip(tasks, results, strict=True):
            reports[name].masks.update(masks)
            reports[name].chunks_written += n
        for name, rep in reports.items():
            rep.stored_after = chunk_bytes_stored(partial, name)
        with warnings.catch_warnings():  # zarr warns that consolidation is not in the v3 spec
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(partial, zarr_format=3)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if os.path.exists(dst):
        shutil.rmtree(dst)
    os.replace(partial, dst)
    elapsed = time.perf_counter() - t0
    for rep in reports.values():
        rep.seconds = elapsed
    return RecompressReport(dst=dst, arrays=list(reports.values()), seconds=elapsed, source_bytes=_source_nbytes(src))


def _template(ds: xr.Dataset, names: list[str], chunks, shards):
    """Dataset for ``to_zarr(compute=False)``: rewritten variables as lazy dask placeholders."""
    import dask.array as da

    out = ds.copy()
    layouts = {}
    for name in names:
        var = ds[name]
        inner_arg = shape_for(chunks, tuple(map(str, var.dims)), tuple(var.shape))
        shard_arg = shape_for(shards, tuple(map(str, var.dims)), tuple(var.shape))
        inner, shard = choose_chunks(tuple(var.shape), var.dtype.itemsize, inner_arg, shard_arg)
        layouts[name] = (inner, shard)
        placeholder = da.empty(var.shape, dtype=var.dtype, chunks=shard or inner)
        out[name] = var.copy(data=placeholder)
    for name in out.variables:
        out[name].encoding = {}
    return out, layouts


def _encodings(names: list[str], split: dict[str, Any], layouts) -> dict[str, dict[str, Any]]:
    enc = {}
    for name in names:
        inner, shard = layouts[name]
        e = {"chunks": inner, **split}
        if shard is not None:
            e["shards"] = shard
        enc[name] = e
    return enc


def _compute(tasks: list, scheduler: str | None, progress) -> list:
    import contextlib

    import dask

    if not tasks:
        return []
    ctx = progress(len(tasks)) if progress else contextlib.nullcontext()
    if scheduler and "://" in scheduler:
        from distributed import Client

        with Client(scheduler) as client, ctx:
            futures = client.compute(tasks)
            if hasattr(ctx, "watch"):
                ctx.watch(futures)
            return client.gather(futures)
    with ctx:
        return list(dask.compute(*tasks, scheduler=scheduler or "threads"))
