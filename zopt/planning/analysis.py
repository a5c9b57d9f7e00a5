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
  the decode time, by trial encoding a sample of the chunk (default: 12 windows of at least
  4 KiB, one centred in each twelfth of the chunk, totalling at least 1/16 of it; chunks of
  at most 64 KiB whole) or the whole chunk (``sample=None``). A task's trials run as batches where a
  codec allows it (``zopt.planning.trials.Trials``): one numpy shuffle for all samples, one blosc call for the zstd
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

This module builds the graph and assembles the Dataset; beside it: ``sampling`` (one task: a
region's chunks read, sampled and measured; the regions and how they are read), ``trials``
(the codecs tried and their batched trial encodings) and ``chunk_stats`` (entropies, value
fractions, digests). The public names this module held before them (``batch_entropies``,
``batch_value_stats``, ``candidate_codecs``, ``entropy_estimate``, ``fill_value_of``) are still
importable from here.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import numpy as np
import xarray as xr
import zarr

from zopt.codecs.conditional import default_header_bits
from zopt.compat.zarr_compat import open_array
from zopt.errors import OptionError
from zopt.planning.chunk_stats import (
    batch_entropies,
    batch_value_stats,
    byte_entropy,
    chunk_digest,
    entropy_estimate,
)
from zopt.planning.sampling import (
    ANALYSIS_WINDOWS,
    RegionSampling,
    analyze_region,
    fill_value_of,
    read_mode,
    task_regions,
    window_spec,
)
from zopt.planning.trials import DEFAULT_CANDIDATES, candidate_codecs
from zopt.store.raw_read import MIN_WINDOW

if TYPE_CHECKING:
    from zopt.planning.optimizer import MenuOptions

__all__ = [
    "DEFAULT_CANDIDATES",
    "AnalyzeOptions",
    "SamplingLike",
    "analyze",
    "analyze_array",
    "byte_entropy",
    "check_sampling",
    "chunk_digest",
    "load_analysis",
    "save_analysis",
    # where they were before the split (zopt.planning.chunk_stats, sampling, trials)
    "batch_entropies",
    "batch_value_stats",
    "candidate_codecs",
    "entropy_estimate",
    "fill_value_of",
]

DEFAULT_SAMPLE = 1 / 16
EARLY_OUT_ENTROPY = 7.9
TASK_BYTES = 64 * 1024 * 1024
READ_MODES = ("auto", "windows", "full")


def _grid_dims(array: zarr.Array[Any]) -> tuple[str, ...]:
    names = getattr(array.metadata, "dimension_names", None)
    if names and all(names):
        return tuple(str(n) for n in names)
    return tuple(f"dim_{i}" for i in range(array.ndim))


def _analysis_chunk_shape(array: zarr.Array[Any], chunks: Sequence[int] | None) -> tuple[int, ...]:
    from zopt.store.shards import layout_of

    if chunks is not None:
        if len(chunks) != array.ndim:
            raise OptionError("chunks", f"{tuple(chunks)} has {len(chunks)} entries, the array has {array.ndim} dimensions")
        return tuple(int(c) for c in chunks)
    layout = layout_of(array)
    if layout is not None:
        return layout.inner_shape
    return tuple(array.metadata.chunks if hasattr(array.metadata, "chunks") else array.chunks)


class SamplingLike(TypedDict, total=False):
    """``analyze_array``'s keyword options on how chunks are sampled, read and measured (each
    described there); absent: the default."""

    sample: float | None
    early_out_entropy: float
    task_bytes: int
    windows: int
    placement: str
    min_window: int
    read: str
    decode_times: bool


def check_sampling(sample: float | None, read: str) -> None:
    """Refuse a ``sample`` outside (0, 1] (None: whole chunks) or an unknown ``read`` mode:
    ValueError naming the option and the allowed values. Reads no data."""
    if sample is not None and not 0 < sample <= 1:
        raise OptionError("sample", f"{sample!r} must be a fraction in (0, 1], or None for whole chunks")
    if read not in READ_MODES:
        raise OptionError("read", f"{read!r} is not one of {list(READ_MODES)}")


def analyze_array(
    store: str | os.PathLike[str],
    name: str,
    *,
    codecs: Sequence[dict[str, Any]] | str | None = None,
    chunks: Sequence[int] | None = None,
    scheduler: str | None = None,
    progress: Callable[[int], Any] | None = None,
    menu: MenuOptions | None = None,
    **sampling: Unpack[SamplingLike],
) -> xr.Dataset:
    """Analyse every chunk of array ``name`` of a Zarr store (see module docstring).

    codecs : the wrapped codec list to try (JSON list or string); default: the array's
        ``conditional`` codec's, else ``DEFAULT_CANDIDATES``.
    chunks : chunk shape of the analysed grid; default the grid the conditional codec sees.
    sample : fraction of each chunk trial-encoded (0 < sample <= 1), None for the whole chunk.
    windows : number of windows the sample is made of.
    placement : ``"spread"`` (default): one window centred in each of ``windows`` equal parts of
        the chunk, each at least ``min_window`` bytes (default 4 KiB; ``zopt.store.raw_read.analysis_windows``;
        the sample is then more than ``sample`` of chunks under ``windows * min_window / sample`` bytes);
        ``"ends"``: windows evenly spaced from the chunk's first byte to its last (zopt 0.1's
        analysis; its estimates are biased where a chunk's first and last rows differ from the
        rest, as the polar and land rows of a lat-lon field: docs/benchmarks.md).
    read : ``"full"`` reads every chunk whole; ``"windows"`` reads only the sample windows
        (``zopt.store.raw_read``: raw-stored sources in a local directory store; the sample's
        bytes); ``"auto"`` (default) reads windows when the source allows it and
        ``sample`` is set. With window reads, ``digest`` is the crc32c of the sample windows
        of the fill-padded chunk (``digest_scope`` attribute ``"windows"``), so a plan checks
        those bytes at write time; with full reads it is the crc32c of the whole chunk's
        values (``"chunk"``).
    decode_times : also time each mask's decoding (one decode per mask and chunk, about as
        costly again as the trial encodes); needed by the ``fastest_within`` policy. Without
        it ``decode_seconds`` is NaN above mask 0 (attribute ``decode_times`` 0).
    early_out_entropy : byte entropy (bits per byte) above which a chunk is not trial-encoded;
    task_bytes : raw bytes a task analyses (about).
    menu : without ``codecs``, also choose the array's chain from this codec menu
        (``zopt.planning.optimizer.MenuOptions``: candidates, budget, readers), by one trial task in the same graph; the masks are then measured
        for the chosen chain's ``conditional`` codecs (the default ones when it has none) and the
        choice is the ``menu_choice`` attribute (``MenuChoice.to_json()`` as JSON text).
    Returns an ``xarray.Dataset`` (dims ``chunk_<dim>…``, ``mask``, ``byte``) whose variables are
    ``raw_bytes``, ``is_fill``, ``digest`` (crc32c of the chunk's values), ``entropy``,
    ``plane_entropy``, ``zero_fraction``, ``run_fraction``, ``nan_fraction``, ``encoded_bytes``,
    ``encode_seconds``, ``decode_seconds`` and ``early_out``; attributes name the array, its
    shape, the chunk shape, the codec list and ``header_bits``.
    Raises ValueError for a bad ``sample``, ``chunks``, ``windows``, ``placement``, ``min_window``
    or ``read`` (or ``read="windows"`` on a source that is not raw-stored locally), KeyError-like
    zarr errors for a missing array.
    """
    import dask

    from zopt._version import __version__
    from zopt.compat.scheduling import compute
    from zopt.store.shards import layout_of

    unknown = sorted(set(sampling) - set(SamplingLike.__annotations__))
    if unknown:
        raise TypeError(f"analyze_array() got an unexpected keyword argument {unknown[0]!r}")
    sample = sampling.get("sample", DEFAULT_SAMPLE)
    early_out_entropy = sampling.get("early_out_entropy", EARLY_OUT_ENTROPY)
    task_bytes = sampling.get("task_bytes", TASK_BYTES)
    windows = sampling.get("windows", ANALYSIS_WINDOWS)
    placement = sampling.get("placement", "spread")
    min_window = sampling.get("min_window", MIN_WINDOW)
    read = sampling.get("read", "auto")
    decode_times = sampling.get("decode_times", False)
    check_sampling(sample, read)
    if isinstance(windows, bool) or not isinstance(windows, int) or windows < 1:
        raise OptionError("windows", f"{windows!r} must be an integer >= 1")
    spec = window_spec(1, windows, placement, min_window)  # checks placement and min_window
    spread = spec[2] if len(spec) > 2 else None
    store = os.fspath(store)
    array = open_array(store, path=name, mode="r")
    chunk_shape = _analysis_chunk_shape(array, chunks)
    mode = read_mode(read, sample, store, array, chunk_shape)
    wrapped, header_bits = candidate_codecs(array, codecs)
    layout = layout_of(array)
    regions = task_regions(tuple(array.shape), chunk_shape, array.dtype.itemsize, task_bytes,
                            layout.shard_shape if layout is not None else None)
    codecs_json = json.dumps(wrapped)
    choice: Any = None
    codecs_arg: Any = codecs_json
    if menu is not None and codecs is None and analysable(array) is None:  # zopt.planning.optimizer, in this graph
        from zopt.planning.optimizer import analysis_choice, wrapped_codecs_json

        choice = analysis_choice(store, name, array.shape, array.dtype, chunk_shape, menu)
        codecs_arg = dask.delayed(wrapped_codecs_json, pure=True)(choice, codecs_json)
    how = RegionSampling(sample, early_out_entropy, windows, mode, decode_times, spread)
    tasks = [
        dask.delayed(analyze_region, pure=False)(
            store, name, r, chunk_shape, codecs_arg, how, dask_key_name=f"zopt-chunk-analyze-{name}-{i}",
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
        sample=-1.0 if sample is None else float(sample), windows=int(windows), placement=placement,
        min_window=-1 if spread is None else int(spread), early_out_entropy=float(early_out_entropy),
        read=mode, digest_scope="windows" if mode == "windows" else "chunk", decode_times=int(decode_times),
        seconds=seconds, zopt_version=__version__,
    )
    if choice is not None:
        ds.attrs["menu_choice"] = json.dumps(choice)
    return ds


class AnalyzeOptions(SamplingLike, total=False):
    """``analyze``'s keyword options: ``analyze_array``'s (each described there)."""

    codecs: Sequence[dict[str, Any]] | str | None
    chunks: Sequence[int] | None
    scheduler: str | None
    progress: Callable[[int], Any] | None
    menu: MenuOptions | None


def analyze(
    store: str | os.PathLike[str], arrays: Sequence[str] | None = None, **kwargs: Unpack[AnalyzeOptions]
) -> dict[str, xr.Dataset]:
    """``analyze_array`` for each named array of the store (default: every array). Keyword
    arguments as for ``analyze_array``."""
    from zopt.io.sources import arrays_in

    return {a.path: analyze_array(store, a.path, **kwargs) for a in arrays_in(store, arrays) if analysable(a) is None}


def analysable(array: zarr.Array[Any]) -> str | None:
    """None if the analysis can measure ``array``, else why not (a note for the user): scalars,
    and arrays of strings, objects or other non-numeric types (recompress copies them as they are)."""
    if array.ndim == 0:
        return "a scalar"
    if array.dtype.kind not in "biufc":
        return f"of {array.dtype} values, not numbers"
    return None


def save_analysis(analyses: dict[str, xr.Dataset], path: str | os.PathLike[str]) -> None:
    """Write analyses as one Zarr v3 group per array under ``path`` (overwriting)."""
    for name, ds in analyses.items():
        ds.to_zarr(os.fspath(path), group=name or "root", mode="w", zarr_format=3, consolidated=False)


def load_analysis(path: str | os.PathLike[str]) -> dict[str, xr.Dataset]:
    """Read analyses written by ``save_analysis``."""
    root = zarr.open_group(os.fspath(path), mode="r")
    out = {}
    for key, _ in root.members(max_depth=None):
        node = root[key]
        if isinstance(node, zarr.Group) and "array" in node.attrs:
            out[str(node.attrs["array"])] = xr.open_zarr(os.fspath(path), group=key, consolidated=False).load()
    return out
