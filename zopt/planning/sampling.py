"""One task of the analysis graph (``zopt.planning.analysis``): the chunks of a region read (whole,
or only their sample windows, ``zopt.store.raw_read``), sampled, measured (``chunk_stats``) and
trial-encoded (``trials``); and how the graph cuts an array into such regions and reads them."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from zopt.codecs.chain import chunk_spec
from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.compat.zarr_compat import open_array
from zopt.errors import OptionError
from zopt.planning.chunk_stats import batch_entropies, batch_value_stats, chunk_digest
from zopt.planning.trials import Trials
from zopt.store.raw_read import MIN_WINDOW

__all__ = ["ANALYSIS_WINDOWS", "PLACEMENTS", "RegionSampling", "analyze_region", "fill_value_of", "read_mode", "task_regions", "window_spec"]

#: sample windows per chunk (``zopt.store.raw_read.analysis_windows``), each at least ``MIN_WINDOW``
#: bytes: enough to see a feature of a tenth of the chunk's rows (sea ice at one pole), few enough
#: to keep the sample of a 256 KiB chunk at 48 KiB (docs/benchmarks.md, "Where the sample lies")
ANALYSIS_WINDOWS = 12
#: where the windows lie: spread through the chunk (the default), or at its ends (zopt 0.1's
#: analysis, biased on lat-lon grids whose first and last rows are land or ice; for comparison)
PLACEMENTS = ("spread", "ends")


def window_spec(fraction: int, windows: int, placement: str, min_window: int = MIN_WINDOW) -> tuple[int, ...]:
    """``(fraction, windows)`` for ends windows, ``(fraction, windows, min_window)`` for spread
    ones: the arguments of ``analysis_windows`` (and a plan's ``digest_windows``). Raises
    ValueError for another placement or a ``min_window`` that is not a positive multiple of 64."""
    if placement not in PLACEMENTS:
        raise OptionError("placement", f"{placement!r} is not one of {list(PLACEMENTS)}")
    if isinstance(min_window, bool) or not isinstance(min_window, int) or min_window < 64 or min_window % 64:
        raise OptionError("min_window", f"{min_window!r} must be a positive multiple of 64 bytes")
    return (fraction, windows) if placement == "ends" else (fraction, windows, min_window)


@dataclass(frozen=True)
class RegionSampling:
    """How ``analyze_region`` samples, reads and measures the chunks of its region
    (``zopt.planning.analysis.analyze_array`` makes it from its options).

    sample : fraction of each chunk trial-encoded (0 < sample <= 1), None for whole chunks.
    early_out : byte entropy (bits per byte) above which a chunk is not trial-encoded.
    windows, min_window : where the sample windows lie (``zopt.store.raw_read.analysis_windows``:
        spread through the chunk, or its ends with ``min_window=None``).
    read : ``"full"`` reads whole chunks through zarr; ``"windows"`` reads only the sample windows
        of the chunks inside the array with ``RawChunkReader`` (the digests then cover the windows).
    decode_times : also time each mask's decoding.
    """

    sample: float | None
    early_out: float
    windows: int = ANALYSIS_WINDOWS
    read: str = "full"
    decode_times: bool = False
    min_window: int | None = MIN_WINDOW


@with_zopt_pipeline
def analyze_region(store: str, name: str, region: tuple[slice, ...], chunk_shape: tuple[int, ...], codecs_json: str,
                   how: RegionSampling) -> dict[str, Any]:
    """Dask task: analyse the chunks of one region (whole chunks), sampled and read as ``how``
    says. Returns the region's chunk-grid coordinates (``"index"``, int ``(n, ndim)``) and one
    array per dataset variable, row ``k`` for chunk ``index[k]`` (see ``analyze_array``).
    """
    from zopt.codecs.grid import is_fill, padded
    from zopt.compat.zarr_compat import resolve_codec
    from zopt.store.checked_read import read_region
    from zopt.store.raw_read import RawChunkReader, analysis_windows, sampled_bytes

    sample, early_out, windows, read, min_window = how.sample, how.early_out, how.windows, how.read, how.min_window
    decode_times = how.decode_times
    array = open_array(store, path=name, mode="r")
    root = store if isinstance(store, str) and os.path.isdir(store) else None  # corrupt chunks named with it
    meta = array.metadata
    dtype = meta.data_type if hasattr(meta, "data_type") else None
    native = array.dtype
    itemsize = native.itemsize
    spec = chunk_spec(chunk_shape, dtype, array.fill_value) if dtype is not None else None
    fill = fill_value_of(array)
    codecs = [resolve_codec(c) for c in json.loads(codecs_json)]
    if spec is not None:
        codecs = [c.evolve_from_array_spec(spec) for c in codecs]
    trials = Trials(codecs, spec, decode_times)
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

    width = raw_nbytes if fraction is None else sum(n for _, n in analysis_windows(raw_nbytes, fraction, windows, min_window))
    samples = np.empty((n, width), dtype=np.uint8)
    empty = np.zeros(n, dtype=bool)
    digests = np.zeros(n, dtype=np.uint32)
    whole = np.flatnonzero((local < extent // np.array(chunk_shape)).all(axis=1)).tolist()
    reader = RawChunkReader.open(store, array) if read == "windows" and fraction is not None else None
    if reader is not None and whole and fraction is not None:  # (a reader is only opened with a fraction)
        samples[whole], empty[whole] = reader.read_windows(chunk_shape, grid_index[whole], fraction, windows, fill,
                                                            min_window)
        for k in whole:
            digests[k] = chunk_digest(samples[k])
        rest = sorted(set(range(n)) - set(whole))
        data = None
    else:
        rest = list(range(n))
        data = read_region(array, region, root)
    edges: dict[int, np.ndarray] = {}  # edge chunks: their values without the padding, for the value statistics
    for k in rest:
        sl = local_region(k)
        if data is not None:
            valid = data[sl]
        else:  # an edge chunk next to window reads: read it alone
            valid = read_region(array, tuple(slice(o + r.start, o + r.stop) for o, r in zip(origin, sl, strict=True)), root)
        chunk = padded(valid, chunk_shape, fill)
        if valid.shape != tuple(chunk_shape) and valid.size:
            edges[k] = np.ascontiguousarray(valid, dtype=native).reshape(1, -1).view(np.uint8)
        raw = np.ascontiguousarray(chunk).view(np.uint8).ravel()
        part = raw if fraction is None else sampled_bytes(raw, fraction, windows, min_window)
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


def task_regions(shape: tuple[int, ...], chunk_shape: tuple[int, ...], itemsize: int, task_bytes: int,
                  shard_shape: tuple[int, ...] | None) -> list[tuple[slice, ...]]:
    from zopt.codecs.grid import fit_shape, regions

    grid = tuple(math.ceil(s / c) for s, c in zip(shape, chunk_shape, strict=True))
    if shard_shape is not None and all(s % c == 0 for s, c in zip(shard_shape, chunk_shape, strict=True)):
        step = shard_shape
    else:
        per = fit_shape(grid, max(1, task_bytes // (itemsize * math.prod(chunk_shape))))
        step = tuple(p * c for p, c in zip(per, chunk_shape, strict=True))
    return regions(shape, step)


def read_mode(read: str, sample: float | None, store: str, array: zarr.Array[Any], chunk_shape: tuple[int, ...]) -> str:
    """``"windows"`` or ``"full"``: how the tasks read chunks (see ``analyze_array``)."""
    from zopt.store.raw_read import RawChunkReader

    if read == "full" or (read == "auto" and sample is None):
        return "full"
    if sample is None:
        raise OptionError("read", "'windows' needs a sample fraction (sample=None analyses whole chunks)")
    reader = RawChunkReader.open(store, array)
    if reader is not None and reader.fits_windows(chunk_shape):
        return "windows"
    if read == "windows":
        raise OptionError("read",
            "'windows' needs a raw-stored source in a local directory store (codecs [bytes], or "
            "sharding_indexed with inner codecs [bytes]) whose stored chunks are multiples of the analysed "
            f"chunk shape {chunk_shape}; use read='full' or 'auto'"
        )
    return "full"


def fill_value_of(array: zarr.Array[Any]) -> np.ndarray:
    """The array's fill value as a numpy scalar of its dtype; zero for a Zarr v2 ``fill_value: null``
    (what zarr reads for a missing chunk of such an array)."""
    if array.fill_value is None:
        return np.zeros((), dtype=array.dtype)
    return np.asarray(array.fill_value, dtype=array.dtype)

