"""Per-chunk analysis as a Dask graph: entropy, zeros, runs, NaNs and trial encodings.

``analyze_array(store, name)`` measures, for every chunk of a chunk grid (by default the grid the
array's ``conditional`` codec sees: the inner-chunk grid of a sharded array), what a plan needs
to choose that chunk's mask (``zopt.planning.plan``):

- order-0 byte entropy of the chunk (bits per byte, 0..8) and of each byte plane (byte ``b``
  of every element);
- the fractions of zero elements, of elements equal to their predecessor in C order (constant
  runs) and of NaNs;
- for every candidate mask of the wrapped codec list, the encoded size (bytes, as an estimate
  for the whole chunk) and the encode time (seconds, likewise), and with ``decode_times=True``
  the decode time, by trial encoding a sample of the chunk (default: 2 evenly spaced windows
  totalling 1/16) or the whole chunk (``sample=None``). A task's trials run as batches where a
  codec allows it (``_Trials``): one numpy shuffle for all samples, one blosc call for the zstd
  sizes of all samples (``zopt.codecs.sync.zstd_row_sizes``).

Entropy is only an early-out: a chunk whose sampled entropy exceeds ``early_out_entropy``
(default 7.9 bits/byte: random or already-compressed bytes) is not trial-encoded, its masks
other than 0 get ``NaN`` sizes, and every policy stores it raw. The statistics are computed on
the same sample as the trials (on the whole chunk with ``sample=None``). On a source stored raw
in a local directory only those windows are read (``read="auto"``, ``zopt.store.raw_read``).

The graph has one task per group of whole chunks of about ``task_bytes`` (64 MiB; one shard
when the grid is a sharded array's inner grid), never the whole array in one task unless it is
that small. The result is an ``xarray.Dataset`` with dimensions ``chunk_<dim>`` (one per array
dimension), ``mask`` and ``byte``; ``save_analysis`` writes it as Zarr.

Size: a little over ~500 lines: the measurements, their batched trial encodings and the Dask
graph that runs them are one concept, and splitting them would scatter the batching that makes
the analysis cheap.
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
from zopt.codecs.decisions import SAMPLE_WINDOWS
from zopt.codecs.sync import sync_decoder, sync_encoder, sync_row_transform, zstd_row_sizes
from zopt.compat.zarr_compat import open_array

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
READ_MODES = ("auto", "windows", "full")


def byte_entropy(data: np.ndarray) -> float:
    """Order-0 entropy of the bytes of ``data`` in bits per byte (0 for empty input)."""
    counts = np.bincount(np.ascontiguousarray(data).view(np.uint8).ravel(), minlength=256)
    n = counts.sum()
    if n == 0:
        return 0.0
    p = counts[counts > 0] / n
    return float(-(p * np.log2(p)).sum()) + 0.0  # no -0.0 for constant data


def _entropy_of_counts(counts: np.ndarray) -> np.ndarray:
    """Entropy in bits of each row of a (..., 256) integer histogram (0 for empty rows).

    H = log2(N) - sum(c log2 c) / N, with c log2 c looked up in a table over 0..max(c).
    """
    n = counts.sum(axis=-1)
    table = np.arange(int(counts.max(initial=0)) + 1, dtype=np.float64)
    table[1:] *= np.log2(table[1:])
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.log2(n) - table[counts].sum(axis=-1) / n
    return np.where(n > 0, np.maximum(h, 0.0), 0.0) + 0.0


def chunk_digest(values: np.ndarray) -> int:
    """crc32c (uint32) of the bytes of ``values`` in C order: the content fingerprint of a chunk."""
    import google_crc32c

    return int(google_crc32c.value(np.ascontiguousarray(values).view(np.uint8).tobytes()))


def _nan_mask(values: np.ndarray) -> np.ndarray:
    """NaN flags of ``values`` (any shape); complex types count an element with a NaN part."""
    if values.dtype.names:  # zopt's structured complex_* types: a NaN in either component
        return _nan_mask(values[values.dtype.names[0]]) | _nan_mask(values[values.dtype.names[1]])
    if values.dtype.kind in "fc":
        return np.isnan(values)
    if values.dtype.kind in "biu":
        return np.zeros(values.shape, dtype=bool)
    return np.isnan(values.astype(np.float32))  # ml_dtypes floats


def batch_value_stats(samples: np.ndarray, native: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(zero, constant-run, NaN) fractions of each row of ``samples``, float64 each, shape (n,).

    samples : uint8 ``(n, nbytes)``, ``nbytes`` a multiple of ``native.itemsize``; row ``k`` is
    the bytes of chunk ``k`` (or of its sample). Zeros compare values for numpy numbers (−0.0
    is zero) and bit patterns otherwise; a run element equals its predecessor bit for bit.
    """
    n = samples.shape[0]
    item = native.itemsize
    count = samples.shape[1] // item
    if n == 0 or count == 0:
        return np.zeros(n), np.zeros(n), np.zeros(n)
    values = np.ascontiguousarray(samples).view(native).reshape(n, count)
    bits = values.view(f"u{item}") if item in (1, 2, 4, 8) else samples.reshape(n, count, item)
    if native.kind in "biufc" and not native.names:
        zero = np.count_nonzero(values == 0, axis=1)
    else:
        zero = np.count_nonzero((bits == 0).reshape(n, count, -1).all(axis=2), axis=1)
    nan = np.count_nonzero(_nan_mask(values), axis=1)
    runs = np.zeros(n, dtype=np.int64)
    if count > 1:  # a one-element chunk has no runs
        same = (bits[:, 1:] == bits[:, :-1]).reshape(n, count - 1, -1).all(axis=2)
        runs = np.count_nonzero(same, axis=1)
    return zero / count, runs / count, nan / count


def batch_entropies(samples: np.ndarray, itemsize: int) -> tuple[np.ndarray, np.ndarray]:
    """Byte entropy (bits/byte) of each row of ``samples`` overall and per byte plane.

    samples : uint8 ``(n, nbytes)``; a trailing partial element of a row counts overall only.
    Returns ``(overall (n,), planes (n, itemsize))``, float64 and float32.
    """
    n, width = samples.shape
    whole = width // itemsize * itemsize
    counts = np.empty((n, itemsize, 256), dtype=np.int64)
    # one bincount per byte plane for all rows at once: row k's bytes count in bins k*256 + value
    offsets = (np.arange(n, dtype=np.intp) * 256)[:, None]
    planes = samples[:, :whole].reshape(n, -1, itemsize)
    for b in range(itemsize):
        counts[:, b] = np.bincount((planes[:, :, b] + offsets).ravel(), minlength=n * 256).reshape(n, 256)
    total = counts.sum(axis=1)
    if whole < width:
        total += np.bincount((samples[:, whole:] + offsets).ravel(), minlength=n * 256).reshape(n, 256)
    return _entropy_of_counts(total), _entropy_of_counts(counts).astype(np.float32)


class _Trials:
    """Encoded size and encode (optionally decode) seconds of every mask of a wrapped codec list,
    for the samples of many chunks at once.

    Mask ``m`` applies the codecs of its set bits in list order, so its output is the output of
    ``m`` without its highest bit ``h`` passed through codec ``h``: each mask costs one encode
    (and one decode) step per chunk, and its times are those of the smaller mask plus that step.
    A codec that transforms all rows in one numpy call (``shuffle``) runs once per batch, and so
    does a zstd step whose output no larger mask uses, when decodes are not timed (its sizes come
    from one blosc call, ``zopt.codecs.sync.zstd_row_sizes``); a batch step's time is shared
    equally among the rows. The other steps run row by row.
    """

    def __init__(self, codecs: Sequence[Any], spec: Any, decode_times: bool = False) -> None:
        self.n = len(codecs)
        self.decode_times = decode_times
        self.encoders = [sync_encoder(c, spec) for c in codecs]
        self.decoders = [sync_decoder(c, spec) for c in codecs]
        self.row_encoders = [sync_row_transform(c) for c in codecs]
        self.row_decoders = [sync_row_transform(c, decode=True) for c in codecs]
        # sizes without outputs: only for the last codec (no larger mask builds on its output)
        self.row_sizes = [zstd_row_sizes(c) if i == self.n - 1 and not decode_times else None for i, c in enumerate(codecs)]

    def run(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """rows: uint8 ``(n, nbytes)``, one sample per row. Returns ``(bytes, encode seconds,
        decode seconds)``, float64 ``(n, 2**len(codecs))`` each; decode seconds are NaN for masks
        above 0 unless ``decode_times``."""
        n_rows = rows.shape[0]
        masks = 1 << self.n
        size = np.empty((n_rows, masks), dtype=np.float64)
        enc_s = np.zeros((n_rows, masks), dtype=np.float64)
        dec_s = np.zeros((n_rows, masks), dtype=np.float64)
        size[:, 0] = rows.shape[1]
        outputs: list[Any] = [rows]  # per mask: a 2-D array (same-length rows) or a list of 1-D arrays
        clock = time.perf_counter
        for m in range(1, masks):
            h = m.bit_length() - 1
            prev = m & ~(1 << h)
            src = outputs[prev]
            if self.row_sizes[h] is not None and isinstance(src, np.ndarray):
                t0 = clock()
                size[:, m] = self.row_sizes[h](src)
                out = None
                enc_step = np.full(n_rows, (clock() - t0) / max(n_rows, 1))
                dec_step = np.zeros(n_rows)
            elif self.row_encoders[h] is not None and isinstance(src, np.ndarray):
                t0 = clock()
                out = self.row_encoders[h](src)
                t1 = clock()
                if self.decode_times:
                    self.row_decoders[h](out)
                size[:, m] = out.shape[1]
                enc_step = np.full(n_rows, (t1 - t0) / max(n_rows, 1))
                dec_step = np.full(n_rows, (clock() - t1) / max(n_rows, 1))
            else:
                encode, decode = self.encoders[h], self.decoders[h]
                out, enc_step, dec_step = [], np.zeros(n_rows), np.zeros(n_rows)
                for k in range(n_rows):
                    t0 = clock()
                    o = encode(src[k])
                    t1 = clock()
                    if self.decode_times:
                        decode(o)
                        dec_step[k] = clock() - t1
                    out.append(o)
                    size[k, m] = o.size
                    enc_step[k] = t1 - t0
            outputs.append(out)
            enc_s[:, m] = enc_s[:, prev] + enc_step
            dec_s[:, m] = dec_s[:, prev] + dec_step
        if not self.decode_times:
            dec_s[:, 1:] = np.nan
        return size, enc_s, dec_s


def _grid_dims(array: zarr.Array) -> tuple[str, ...]:
    names = getattr(array.metadata, "dimension_names", None)
    if names and all(names):
        return tuple(str(n) for n in names)
    return tuple(f"dim_{i}" for i in range(array.ndim))


def _analysis_chunk_shape(array: zarr.Array, chunks: Sequence[int] | None) -> tuple[int, ...]:
    from zopt.store.shards import layout_of

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
    sample: float | None, early_out: float, windows: int = SAMPLE_WINDOWS, read: str = "full",
    decode_times: bool = False,
) -> dict[str, Any]:
    """Dask task: analyse the chunks of one region (whole chunks). Returns the region's chunk-grid
    coordinates (``"index"``, int ``(n, ndim)``) and one array per dataset variable, row ``k``
    for chunk ``index[k]``.

    read : ``"full"`` reads whole chunks through zarr; ``"windows"`` reads only the sample
    windows of the chunks inside the array with ``RawChunkReader`` (the digests then cover
    the windows, see ``analyze_array``).
    """
    from zopt.codecs.grid import is_fill, padded
    from zopt.compat.zarr_compat import resolve_codec
    from zopt.store.raw_read import RawChunkReader, analysis_windows, sampled_bytes

    array = open_array(store, path=name, mode="r")
    meta = array.metadata
    dtype = meta.data_type if hasattr(meta, "data_type") else None
    native = array.dtype
    itemsize = native.itemsize
    spec = chunk_spec(chunk_shape, dtype, array.fill_value) if dtype is not None else None
    fill = fill_value_of(array)
    codecs = [resolve_codec(c) for c in json.loads(codecs_json)]
    if spec is not None:
        codecs = [c.evolve_from_array_spec(spec) for c in codecs]
    trials = _Trials(codecs, spec, decode_times)
    fraction = None if sample is None else max(1, round(1 / sample))
    origin = [r.start for r in region]
    counts = [math.ceil((r.stop - r.start) / c) for r, c in zip(region, chunk_shape, strict=True)]
    raw_nbytes = math.prod(chunk_shape) * itemsize
    n = math.prod(counts)
    local = np.stack(np.unravel_index(np.arange(n), counts), axis=1) if n else np.zeros((0, len(counts)), np.intp)
    extent = np.array([r.stop - r.start for r in region])
    grid_index = local + np.array(origin) // np.array(chunk_shape)

    def local_region(k: int) -> tuple[slice, ...]:
        return tuple(slice(i * c, min((i + 1) * c, e)) for i, c, e in zip(local[k].tolist(), chunk_shape, extent.tolist(), strict=True))

    width = raw_nbytes if fraction is None else sum(n for _, n in analysis_windows(raw_nbytes, fraction, windows))
    samples = np.empty((n, width), dtype=np.uint8)
    empty = np.zeros(n, dtype=bool)
    digests = np.zeros(n, dtype=np.uint32)
    whole = np.flatnonzero((local < extent // np.array(chunk_shape)).all(axis=1)).tolist()
    reader = RawChunkReader.open(store, array) if read == "windows" and fraction is not None else None
    if reader is not None and whole:
        samples[whole], empty[whole] = reader.read_windows(chunk_shape, grid_index[whole], fraction, windows, fill)
        for k in whole:
            digests[k] = chunk_digest(samples[k])
        rest = sorted(set(range(n)) - set(whole))
        data = None
    else:
        rest = list(range(n))
        data = array[region]
    edges: dict[int, np.ndarray] = {}  # edge chunks: their values without the padding, for the value statistics
    for k in rest:
        sl = local_region(k)
        if data is not None:
            valid = data[sl]
        else:  # an edge chunk next to window reads: read it alone
            valid = array[tuple(slice(o + r.start, o + r.stop) for o, r in zip(origin, sl, strict=True))]
        chunk = padded(valid, chunk_shape, fill)
        if valid.shape != tuple(chunk_shape) and valid.size:
            edges[k] = np.ascontiguousarray(valid, dtype=native).reshape(1, -1).view(np.uint8)
        raw = np.ascontiguousarray(chunk).view(np.uint8).ravel()
        part = raw if fraction is None else sampled_bytes(raw, fraction, windows)
        samples[k] = part
        empty[k] = is_fill(chunk, fill)
        digests[k] = chunk_digest(part if read == "windows" else valid)
    entropy, planes = batch_entropies(samples, itemsize)
    zero, runs, nan = batch_value_stats(samples[:, : width // itemsize * itemsize], native)
    for k, values in edges.items():  # the padding is not data: "NaN 5 %" on an array without NaN otherwise
        zero[k], runs[k], nan[k] = (float(v[0]) for v in batch_value_stats(values, native))
    scale = raw_nbytes / max(width, 1)
    masks = 1 << trials.n
    size = np.full((n, masks), np.nan)
    enc_s = np.full((n, masks), np.nan)
    dec_s = np.full((n, masks), np.nan)
    size[:, 0], enc_s[:, 0], dec_s[:, 0] = raw_nbytes, 0.0, 0.0
    early = ~empty & (entropy > early_out)
    todo = np.flatnonzero(~empty & ~early)
    if todo.size:
        t_size, t_enc, t_dec = trials.run(samples[todo])
        size[todo, 1:] = np.round(t_size[:, 1:] * scale)
        enc_s[todo, 1:] = t_enc[:, 1:] * scale
        dec_s[todo, 1:] = t_dec[:, 1:] * scale
    return {"index": grid_index, "raw_bytes": raw_nbytes, "is_fill": empty, "digest": digests, "entropy": entropy,
            "plane_entropy": planes, "zero_fraction": zero, "run_fraction": runs, "nan_fraction": nan,
            "encoded_bytes": size, "encode_seconds": enc_s, "decode_seconds": dec_s, "early_out": early}


def _task_regions(shape: tuple[int, ...], chunk_shape: tuple[int, ...], itemsize: int, task_bytes: int,
                  shard_shape: tuple[int, ...] | None) -> list[tuple[slice, ...]]:
    from zopt.codecs.grid import fit_shape, regions

    grid = tuple(math.ceil(s / c) for s, c in zip(shape, chunk_shape, strict=True))
    if shard_shape is not None and all(s % c == 0 for s, c in zip(shard_shape, chunk_shape, strict=True)):
        step = shard_shape
    else:
        per = fit_shape(grid, max(1, task_bytes // (itemsize * math.prod(chunk_shape))))
        step = tuple(p * c for p, c in zip(per, chunk_shape, strict=True))
    return regions(shape, step)


def _read_mode(read: str, sample: float | None, store: str, array: zarr.Array, chunk_shape: tuple[int, ...]) -> str:
    """``"windows"`` or ``"full"``: how the tasks read chunks (see ``analyze_array``)."""
    from zopt.store.raw_read import RawChunkReader

    if read == "full" or (read == "auto" and sample is None):
        return "full"
    if sample is None:
        raise ValueError("read: 'windows' needs a sample fraction (sample=None analyses whole chunks)")
    reader = RawChunkReader.open(store, array)
    if reader is not None and reader.fits_windows(chunk_shape):
        return "windows"
    if read == "windows":
        raise ValueError(
            "read: 'windows' needs a raw-stored source in a local directory store (codecs [bytes], or "
            "sharding_indexed with inner codecs [bytes]) whose stored chunks are multiples of the analysed "
            f"chunk shape {chunk_shape}; use read='full' or 'auto'"
        )
    return "full"


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
    read: str = "auto",
    decode_times: bool = False,
    menu: Any = None,
    budget: Any = None,
    readers: Any = None,
) -> xr.Dataset:
    """Analyse every chunk of array ``name`` of a Zarr store (see module docstring).

    codecs : the wrapped codec list to try (JSON list or string); default: the array's
        ``conditional`` codec's, else ``DEFAULT_CANDIDATES``.
    chunks : chunk shape of the analysed grid; default the grid the conditional codec sees.
    sample : fraction of each chunk trial-encoded (0 < sample <= 1), None for the whole chunk.
    windows : number of evenly spaced windows the sample is made of.
    read : ``"full"`` reads every chunk whole; ``"windows"`` reads only the sample windows
        (``zopt.store.raw_read``: raw-stored sources in a local directory store; 1/16 of the
        bytes by default); ``"auto"`` (default) reads windows when the source allows it and
        ``sample`` is set. With window reads, ``digest`` is the crc32c of the sample windows
        of the fill-padded chunk (``digest_scope`` attribute ``"windows"``), so a plan checks
        those bytes at write time; with full reads it is the crc32c of the whole chunk's
        values (``"chunk"``).
    decode_times : also time each mask's decoding (one decode per mask and chunk, about as
        costly again as the trial encodes); needed by the ``fastest_within`` policy. Without
        it ``decode_seconds`` is NaN above mask 0 (attribute ``decode_times`` 0).
    menu, budget, readers : without ``codecs``, also choose the array's chain from this codec menu
        (``zopt.planning.candidates``; ``"default"``, ``"archive"`` or candidate names) within ``budget``
        (``zopt.planning.optimizer``), by one trial task in the same graph; the masks are then measured
        for the chosen chain's ``conditional`` codecs (the default ones when it has none) and the
        choice is the ``menu_choice`` attribute (``MenuChoice.to_json()`` as JSON text).
    Returns an ``xarray.Dataset`` (dims ``chunk_<dim>…``, ``mask``, ``byte``) whose variables are
    ``raw_bytes``, ``is_fill``, ``digest`` (crc32c of the chunk's values), ``entropy``,
    ``plane_entropy``, ``zero_fraction``, ``run_fraction``, ``nan_fraction``, ``encoded_bytes``,
    ``encode_seconds``, ``decode_seconds`` and ``early_out``; attributes name the array, its
    shape, the chunk shape, the codec list and ``header_bits``.
    Raises ValueError for a bad ``sample``, ``chunks`` or ``read`` (or ``read="windows"`` on a
    source that is not raw-stored locally), KeyError-like zarr errors for a missing array.
    """
    import dask

    from zopt._version import __version__
    from zopt.compat.scheduling import compute
    from zopt.store.shards import layout_of

    if sample is not None and not 0 < sample <= 1:
        raise ValueError(f"sample: {sample!r} must be a fraction in (0, 1], or None for whole chunks")
    if read not in READ_MODES:
        raise ValueError(f"read: {read!r} is not one of {list(READ_MODES)}")
    store = os.fspath(store)
    array = open_array(store, path=name, mode="r")
    chunk_shape = _analysis_chunk_shape(array, chunks)
    mode = _read_mode(read, sample, store, array, chunk_shape)
    wrapped, header_bits = candidate_codecs(array, codecs)
    layout = layout_of(array)
    regions = _task_regions(tuple(array.shape), chunk_shape, array.dtype.itemsize, task_bytes,
                            layout.shard_shape if layout is not None else None)
    codecs_json = json.dumps(wrapped)
    choice: Any = None
    codecs_arg: Any = codecs_json
    if menu is not None and codecs is None and analysable(array) is None:  # zopt.planning.optimizer, in this graph
        from zopt.planning.optimizer import analysis_choice, wrapped_codecs_json

        choice = analysis_choice(store, name, array.shape, array.dtype, chunk_shape, menu=menu, budget=budget, readers=readers)
        codecs_arg = dask.delayed(wrapped_codecs_json, pure=True)(choice, codecs_json)
    tasks = [
        dask.delayed(_analyze_region, pure=False)(
            store, name, r, chunk_shape, codecs_arg, sample, early_out_entropy, windows, mode, decode_times,
            dask_key_name=f"zopt-chunk-analyze-{name}-{i}",
        )
        for i, r in enumerate(regions)
    ]
    t = time.perf_counter()
    from dask.delayed import Delayed

    results = compute(tasks + ([choice] if isinstance(choice, Delayed) else []), scheduler, progress)
    if len(results) > len(tasks):
        choice = results.pop()
    if choice is not None:
        from zopt.planning.optimizer import wrapped_codecs_json

        wrapped = json.loads(wrapped_codecs_json(choice, codecs_json))
        header_bits = header_bits if json.dumps(wrapped) == codecs_json else default_header_bits(len(wrapped))
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
    for part in results:
        at = tuple(part["index"].T)
        for key, arr in v.items():
            arr[at] = part[key]
    dims = tuple(f"chunk_{d}" for d in _grid_dims(array))
    data_vars = {}
    for key, arr in v.items():
        extra = ("byte",) if key == "plane_entropy" else ("mask",) if arr.ndim == len(grid) + 1 else ()
        data_vars[key] = (dims + extra, arr)
    ds = xr.Dataset(data_vars, coords={d: np.arange(n) for d, n in zip(dims, grid, strict=True)} | {"mask": np.arange(n_masks), "byte": np.arange(itemsize)})
    ds.attrs.update(
        array=name, store=store, shape=list(array.shape), chunk_shape=list(chunk_shape), dtype=str(array.dtype),
        codecs=json.dumps(wrapped), header_bits=header_bits,
        sample=-1.0 if sample is None else float(sample), windows=int(windows), early_out_entropy=float(early_out_entropy),
        read=mode, digest_scope="windows" if mode == "windows" else "chunk", decode_times=int(decode_times),
        seconds=seconds, zopt_version=__version__,
    )
    if choice is not None:
        ds.attrs["menu_choice"] = json.dumps(choice)
    return ds


def analyze(
    store: str | os.PathLike, arrays: Sequence[str] | None = None, **kwargs: Any
) -> dict[str, xr.Dataset]:
    """``analyze_array`` for each named array of the store (default: every array). Keyword
    arguments as for ``analyze_array``."""
    from zopt.io.sources import arrays_in

    return {a.path: analyze_array(store, a.path, **kwargs) for a in arrays_in(store, arrays) if analysable(a) is None}


def fill_value_of(array: zarr.Array) -> np.ndarray:
    """The array's fill value as a numpy scalar of its dtype; zero for a Zarr v2 ``fill_value: null``
    (what zarr reads for a missing chunk of such an array)."""
    if array.fill_value is None:
        return np.zeros((), dtype=array.dtype)
    return np.asarray(array.fill_value, dtype=array.dtype)


def analysable(array: zarr.Array) -> str | None:
    """None if the analysis can measure ``array``, else why not (a note for the user): scalars,
    and arrays of strings, objects or other non-numeric types (recompress copies them as they are)."""
    if array.ndim == 0:
        return "a scalar"
    if array.dtype.kind not in "biufc":
        return f"of {array.dtype} values, not numbers"
    return None


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
