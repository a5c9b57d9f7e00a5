"""Per-chunk analysis as a Dask graph: entropy, zeros, runs, NaNs and trial encodings.

``analyze_array(store, name)`` measures, for every chunk of a chunk grid (by default the grid the
array's ``conditional`` codec sees: the inner-chunk grid of a sharded array), what a plan needs
to choose that chunk's mask (``zopt.plan``):

- order-0 byte entropy of the chunk (bits per byte, 0..8) and of each byte plane (byte ``b``
  of every element);
- the fractions of zero elements, of elements equal to their predecessor in C order (constant
  runs) and of NaNs;
- for every candidate mask of the wrapped codec list, the encoded size (bytes, as an estimate
  for the whole chunk) and the encode and decode times (seconds, likewise), by trial encoding
  a sample of the chunk (default: 2 evenly spaced windows totalling 1/16, as the
  ``compress_if_smaller`` heuristic samples) or the whole chunk (``sample=None``).

Entropy is only an early-out: a chunk whose sampled entropy exceeds ``early_out_entropy``
(default 7.9 bits/byte: random or already-compressed bytes) is not trial-encoded, its masks
other than 0 get ``NaN`` sizes, and every policy stores it raw. The statistics are computed on
the same sample as the trials (on the whole chunk with ``sample=None``).

The graph has one task per group of whole chunks of about ``task_bytes`` (64 MiB; one shard
when the grid is a sharded array's inner grid), never the whole array in one task unless it is
that small. The result is an ``xarray.Dataset`` with dimensions ``chunk_<dim>`` (one per array
dimension), ``mask`` and ``byte``; ``save_analysis`` writes it as Zarr.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import xarray as xr
import zarr

from zopt.codecs.chain import chunk_spec
from zopt.codecs.conditional import conditional_codecs_in, default_header_bits
from zopt.codecs.sync import sync_decoder, sync_encoder
from zopt.decisions import SAMPLE_WINDOWS, _sample

__all__ = [
    "DEFAULT_CANDIDATES",
    "analyze",
    "analyze_array",
    "byte_entropy",
    "chunk_digest",
    "load_analysis",
    "save_analysis",
]

#: wrapped codecs tried when the array has no conditional codec
DEFAULT_CANDIDATES: list[dict[str, Any]] = [
    {"name": "shuffle"},
    {"name": "zstd", "configuration": {"level": 3}},
]
DEFAULT_SAMPLE = 1 / 16
EARLY_OUT_ENTROPY = 7.9
TASK_BYTES = 64 * 1024 * 1024


def byte_entropy(data: np.ndarray) -> float:
    """Order-0 entropy of the bytes of ``data`` in bits per byte (0 for empty input)."""
    counts = np.bincount(np.ascontiguousarray(data).view(np.uint8).ravel(), minlength=256)
    n = counts.sum()
    if n == 0:
        return 0.0
    p = counts[counts > 0] / n
    return float(-(p * np.log2(p)).sum()) + 0.0  # no -0.0 for constant data


def _entropy_of_counts(counts: np.ndarray) -> np.ndarray:
    """Entropy in bits of each row of a (..., 256) histogram (0 for empty rows)."""
    n = counts.sum(axis=-1, keepdims=True)
    p = counts / np.maximum(n, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log2(p), 0.0)
    return -terms.sum(axis=-1) + 0.0


def entropies(data: np.ndarray, itemsize: int) -> tuple[float, np.ndarray]:
    """Byte entropy overall and of each byte plane (bits/byte), from one histogram.

    data: bytes (any shape, viewed as uint8); a trailing partial element counts overall only.
    Returns ``(overall, planes)`` with ``planes`` of shape (itemsize,), float32.
    """
    u8 = np.ascontiguousarray(data).view(np.uint8).ravel()
    whole = u8.size // itemsize * itemsize
    plane = np.tile(np.arange(itemsize, dtype=np.int64) * 256, whole // itemsize)
    counts = np.bincount(plane + u8[:whole], minlength=256 * itemsize).reshape(itemsize, 256)
    total = counts.sum(axis=0) + np.bincount(u8[whole:], minlength=256)
    return float(_entropy_of_counts(total)), _entropy_of_counts(counts).astype(np.float32)


def plane_entropy(data: np.ndarray, itemsize: int) -> np.ndarray:
    """Entropy (bits/byte) of each byte plane: byte ``b`` of every element; shape (itemsize,)."""
    return entropies(data, itemsize)[1]


def chunk_digest(values: np.ndarray) -> int:
    """crc32c (uint32) of the bytes of ``values`` in C order: the content fingerprint of a chunk."""
    import google_crc32c

    return int(google_crc32c.value(np.ascontiguousarray(values).view(np.uint8).tobytes()))


def _value_stats(values: np.ndarray) -> tuple[float, float, float]:
    """(zero, constant-run, NaN) fractions of the elements of ``values``."""
    flat = values.ravel()
    if flat.size == 0:
        return 0.0, 0.0, 0.0
    kind = flat.dtype.kind
    if kind in "biufc":
        zero = float(np.count_nonzero(flat == 0)) / flat.size
        nan = float(np.count_nonzero(np.isnan(flat))) / flat.size if kind in "fc" else 0.0
    else:  # ml_dtypes and other types: compare bit patterns
        bits = flat.view(f"u{flat.dtype.itemsize}") if flat.dtype.itemsize in (1, 2, 4, 8) else flat.view(np.uint8)
        zero = float(np.count_nonzero(bits == 0)) / flat.size
        nan = float(np.count_nonzero(np.isnan(flat.astype(np.float32)))) / flat.size
    u = flat.view(f"u{flat.dtype.itemsize}") if flat.dtype.itemsize in (1, 2, 4, 8) else flat.view(np.uint8)
    runs = float(np.count_nonzero(u[1:] == u[:-1])) / flat.size if flat.size > 1 else 0.0
    return zero, runs, nan


class _Trials:
    """Encoded size and encode/decode time of every mask of a wrapped codec list."""

    def __init__(self, codecs: Sequence[Any], spec: Any) -> None:
        self.n = len(codecs)
        self.encoders = [sync_encoder(c, spec) for c in codecs]
        self.decoders = [sync_decoder(c, spec) for c in codecs]

    def run(self, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        masks = 1 << self.n
        size = np.empty(masks, dtype=np.float64)
        enc_s = np.zeros(masks, dtype=np.float64)
        dec_s = np.zeros(masks, dtype=np.float64)
        for m in range(masks):
            out = data
            t = time.perf_counter()
            for i in range(self.n):
                if m >> i & 1:
                    out = self.encoders[i](out)
            enc_s[m] = time.perf_counter() - t
            size[m] = out.size
            t = time.perf_counter()
            for i in reversed(range(self.n)):
                if m >> i & 1:
                    out = self.decoders[i](out)
            dec_s[m] = time.perf_counter() - t
        return size, enc_s, dec_s


def _grid_dims(array: zarr.Array) -> tuple[str, ...]:
    names = getattr(array.metadata, "dimension_names", None)
    if names and all(names):
        return tuple(str(n) for n in names)
    return tuple(f"dim_{i}" for i in range(array.ndim))


def _analysis_chunk_shape(array: zarr.Array, chunks: Sequence[int] | None) -> tuple[int, ...]:
    from zopt.shards import layout_of

    if chunks is not None:
        if len(chunks) != array.ndim:
            raise ValueError(f"chunks: {tuple(chunks)} has {len(chunks)} entries, the array has {array.ndim} dimensions")
        return tuple(int(c) for c in chunks)
    layout = layout_of(array)
    if layout is not None:
        return layout.inner_shape
    return tuple(array.metadata.chunks if hasattr(array.metadata, "chunks") else array.chunks)


def candidate_codecs(array: zarr.Array, codecs: Sequence[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], int]:
    """The wrapped codec list (JSON) and ``header_bits`` to analyse for ``array``.

    Given ``codecs`` win; else the array's first ``conditional`` codec; else ``DEFAULT_CANDIDATES``.
    """
    if codecs is not None:
        codecs = json.loads(codecs) if isinstance(codecs, str) else list(codecs)
        return codecs, default_header_bits(len(codecs))
    found = conditional_codecs_in(getattr(array.metadata, "codecs", ()))
    if found:
        return [c.to_dict() for c in found[0].codecs], found[0].header_bits
    return json.loads(json.dumps(DEFAULT_CANDIDATES)), default_header_bits(len(DEFAULT_CANDIDATES))


def _analyze_region(
    store: str, name: str, region: tuple[slice, ...], chunk_shape: tuple[int, ...], codecs_json: str,
    sample: float | None, early_out: float, windows: int = SAMPLE_WINDOWS,
) -> list[tuple]:
    """Dask task: analyse the chunks of one region (whole chunks). Returns one record per chunk."""
    from zarr.registry import _resolve_codec

    from zopt.shards import is_fill, padded

    array = zarr.open_array(store, path=name, mode="r")
    meta = array.metadata
    dtype = meta.data_type if hasattr(meta, "data_type") else None
    native = array.dtype
    itemsize = native.itemsize
    spec = chunk_spec(chunk_shape, dtype, array.fill_value) if dtype is not None else None
    codecs = [_resolve_codec(c).evolve_from_array_spec(spec) if spec is not None else _resolve_codec(c) for c in json.loads(codecs_json)]
    trials = _Trials(codecs, spec)
    data = array[region]
    fill = np.asarray(array.fill_value, dtype=native)
    origin = [r.start for r in region]
    counts = [math.ceil((r.stop - r.start) / c) for r, c in zip(region, chunk_shape, strict=True)]
    out = []
    for local in np.ndindex(*counts):
        index = tuple(o // c + i for o, c, i in zip(origin, chunk_shape, local, strict=True))
        sl = tuple(slice(i * c, min((i + 1) * c, d.stop - d.start)) for i, c, d in zip(local, chunk_shape, region, strict=True))
        valid = data[sl]
        chunk = padded(valid, chunk_shape, fill)
        raw = np.ascontiguousarray(chunk).view(np.uint8).ravel()
        digest = chunk_digest(valid)
        empty = is_fill(chunk, fill)
        part = raw if sample is None or raw.size <= 64 * 1024 else _sample(raw, max(1, round(1 / sample)), windows)
        values = part[: part.size // itemsize * itemsize].view(native)
        entropy, planes = entropies(part, itemsize)
        zero, runs, nan = _value_stats(values)
        scale = raw.size / max(part.size, 1)
        if empty or entropy > early_out:
            size = np.full(1 << trials.n, np.nan)
            size[0] = raw.size
            enc_s = np.full(1 << trials.n, np.nan)
            dec_s = np.full(1 << trials.n, np.nan)
            enc_s[0] = dec_s[0] = 0.0
            early = not empty
        else:
            size, enc_s, dec_s = trials.run(part)
            size = np.where(np.arange(size.size) == 0, raw.size, np.round(size * scale))
            enc_s, dec_s = enc_s * scale, dec_s * scale
            early = False
        out.append((index, raw.size, empty, digest, entropy, planes, zero, runs, nan, size, enc_s, dec_s, early))
    return out


def _task_regions(shape: tuple[int, ...], chunk_shape: tuple[int, ...], itemsize: int, task_bytes: int,
                  shard_shape: tuple[int, ...] | None) -> list[tuple[slice, ...]]:
    from zopt.engine import _fit, _regions

    grid = tuple(math.ceil(s / c) for s, c in zip(shape, chunk_shape, strict=True))
    if shard_shape is not None and all(s % c == 0 for s, c in zip(shard_shape, chunk_shape, strict=True)):
        step = shard_shape
    else:
        per = _fit(grid, max(1, task_bytes // (itemsize * math.prod(chunk_shape))))
        step = tuple(p * c for p, c in zip(per, chunk_shape, strict=True))
    return _regions(shape, step)


def analyze_array(
    store: str | os.PathLike,
    name: str,
    *,
    codecs: Sequence[dict[str, Any]] | str | None = None,
    chunks: Sequence[int] | None = None,
    sample: float | None = DEFAULT_SAMPLE,
    early_out_entropy: float = EARLY_OUT_ENTROPY,
    scheduler: str | None = None,
    progress: Callable[[int], Any] | None = None,
    task_bytes: int = TASK_BYTES,
    windows: int = SAMPLE_WINDOWS,
) -> xr.Dataset:
    """Analyse every chunk of array ``name`` of a Zarr store (see module docstring).

    codecs : the wrapped codec list to try (JSON list or string); default: the array's
        ``conditional`` codec's, else ``DEFAULT_CANDIDATES``.
    chunks : chunk shape of the analysed grid; default the grid the conditional codec sees.
    sample : fraction of each chunk trial-encoded (0 < sample <= 1), None for the whole chunk.
    windows : number of evenly spaced windows the sample is made of.
    Returns an ``xarray.Dataset`` (dims ``chunk_<dim>…``, ``mask``, ``byte``) whose variables are
    ``raw_bytes``, ``is_fill``, ``digest`` (crc32c of the chunk's values), ``entropy``,
    ``plane_entropy``, ``zero_fraction``, ``run_fraction``, ``nan_fraction``, ``encoded_bytes``,
    ``encode_seconds``, ``decode_seconds`` and ``early_out``; attributes name the array, its
    shape, the chunk shape, the codec list and ``header_bits``.
    Raises ValueError for a bad ``sample`` or ``chunks``, KeyError-like zarr errors for a
    missing array.
    """
    import dask

    from zopt import __version__
    from zopt.engine import _compute
    from zopt.shards import layout_of

    if sample is not None and not 0 < sample <= 1:
        raise ValueError(f"sample: {sample!r} must be a fraction in (0, 1], or None for whole chunks")
    store = os.fspath(store)
    array = zarr.open_array(store, path=name, mode="r")
    chunk_shape = _analysis_chunk_shape(array, chunks)
    wrapped, header_bits = candidate_codecs(array, codecs)
    layout = layout_of(array)
    regions = _task_regions(tuple(array.shape), chunk_shape, array.dtype.itemsize, task_bytes,
                            layout.shard_shape if layout is not None else None)
    codecs_json = json.dumps(wrapped)
    tasks = [
        dask.delayed(_analyze_region, pure=False)(
            store, name, r, chunk_shape, codecs_json, sample, early_out_entropy, windows,
            dask_key_name=f"zopt-chunk-analyze-{name}-{i}",
        )
        for i, r in enumerate(regions)
    ]
    t = time.perf_counter()
    results = _compute(tasks, scheduler, progress)
    seconds = time.perf_counter() - t
    grid = tuple(math.ceil(s / c) for s, c in zip(array.shape, chunk_shape, strict=True))
    n_masks = 1 << len(wrapped)
    itemsize = array.dtype.itemsize
    v = {
        "raw_bytes": np.zeros(grid, np.int64), "is_fill": np.zeros(grid, bool), "digest": np.zeros(grid, np.uint32),
        "entropy": np.zeros(grid, np.float32), "plane_entropy": np.zeros((*grid, itemsize), np.float32),
        "zero_fraction": np.zeros(grid, np.float32), "run_fraction": np.zeros(grid, np.float32),
        "nan_fraction": np.zeros(grid, np.float32), "encoded_bytes": np.zeros((*grid, n_masks), np.float64),
        "encode_seconds": np.zeros((*grid, n_masks), np.float64), "decode_seconds": np.zeros((*grid, n_masks), np.float64),
        "early_out": np.zeros(grid, bool),
    }
    order = list(v)
    for records in results:
        for index, *values in records:
            for key, value in zip(order, values, strict=True):
                v[key][index] = value
    dims = tuple(f"chunk_{d}" for d in _grid_dims(array))
    data_vars = {}
    for key, arr in v.items():
        extra = ("byte",) if key == "plane_entropy" else ("mask",) if arr.ndim == len(grid) + 1 else ()
        data_vars[key] = (dims + extra, arr)
    ds = xr.Dataset(data_vars, coords={d: np.arange(n) for d, n in zip(dims, grid, strict=True)} | {"mask": np.arange(n_masks), "byte": np.arange(itemsize)})
    ds.attrs.update(
        array=name, store=store, shape=list(array.shape), chunk_shape=list(chunk_shape), dtype=str(array.dtype),
        codecs=json.dumps(wrapped), header_bits=header_bits,
        sample=-1.0 if sample is None else float(sample), early_out_entropy=float(early_out_entropy),
        seconds=seconds, zopt_version=__version__,
    )
    return ds


def analyze(
    store: str | os.PathLike, arrays: Sequence[str] | None = None, **kwargs: Any
) -> dict[str, xr.Dataset]:
    """``analyze_array`` for each named array of the store (default: every array). Keyword
    arguments as for ``analyze_array``."""
    from zopt.info import arrays_in

    return {a.path: analyze_array(store, a.path, **kwargs) for a in arrays_in(store, arrays) if a.ndim >= 1}


def save_analysis(analyses: dict[str, xr.Dataset], path: str | os.PathLike) -> None:
    """Write analyses as one Zarr v3 group per array under ``path`` (overwriting)."""
    for name, ds in analyses.items():
        ds.to_zarr(os.fspath(path), group=name or "root", mode="w", zarr_format=3, consolidated=False)


def load_analysis(path: str | os.PathLike) -> dict[str, xr.Dataset]:
    """Read analyses written by ``save_analysis``."""
    root = zarr.open_group(os.fspath(path), mode="r")
    out = {}
    for key, _ in root.members(max_depth=None):
        node = root[key]
        if isinstance(node, zarr.Group) and "array" in node.attrs:
            out[str(node.attrs["array"])] = xr.open_zarr(os.fspath(path), group=key, consolidated=False).load()
    return out


def entropy_estimate(ds: xr.Dataset) -> xr.Dataset:
    """The analysis with ``encoded_bytes`` replaced by an entropy-only estimate (no trials).

    For a wrapped list of byte shuffles and compressors: a mask without a compressor stores the
    raw size; with one, ``raw * H / 8`` where ``H`` is the order-0 entropy of the bytes, or the
    mean byte-plane entropy when a shuffle precedes the compressor. A baseline for
    ``benchmarks/plan_quality.py``; raises ValueError for other codec lists.
    """
    codecs = json.loads(ds.attrs["codecs"])
    names = [c["name"] for c in codecs]
    if any(n not in ("shuffle", "zstd", "gzip", "blosc") for n in names):
        raise ValueError(f"codecs: the entropy estimate knows shuffle and compressors only, got {names}")
    raw = ds["raw_bytes"].values.astype(np.float64)
    h = ds["entropy"].values.astype(np.float64)
    hp = ds["plane_entropy"].values.astype(np.float64).mean(axis=-1)
    sizes = np.empty(ds["encoded_bytes"].shape, dtype=np.float64)
    for m in range(sizes.shape[-1]):
        applied = [n for i, n in enumerate(names) if m >> i & 1]
        if not any(n != "shuffle" for n in applied):
            sizes[..., m] = raw
            continue
        first = next(i for i, n in enumerate(applied) if n != "shuffle")
        sizes[..., m] = raw * (hp if "shuffle" in applied[:first] else h) / 8
    out = ds.copy()
    out["encoded_bytes"] = (ds["encoded_bytes"].dims, sizes)
    out["early_out"] = (ds["early_out"].dims, np.zeros(ds["early_out"].shape, bool))
    return out
