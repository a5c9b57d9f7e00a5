"""What zarr-python's default codecs would store for an array, on the same chunks and shards.

``zarr_default_bytes(store, names)`` re-encodes every shard (every chunk when unsharded) of the
named arrays of a Zarr v3 store with the codecs ``zarr.create_array`` picks when none are given
(for numbers: ``bytes`` + ``zstd(level=0)``; the shard index with ``crc32c``), into an in-memory
array per Dask task, and sums the bytes. Same inner chunks, same shards, same fill value and the
same rule for chunks equal to the fill value (not stored), so the sum is what ``zarr`` alone
would have written for the same data: the "vs zarr default" column of ``zopt recompress
--vs-default``. Arrays the job wrote lossy (a ``zopt_lossy`` attribute) are encoded from the
job's source, not from their rounded values (issue 35: zarr's default of the lossy output is not
what zarr alone would have stored). Nothing is written to disk.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from zopt.codecs.zarr_config import with_zopt_pipeline

if TYPE_CHECKING:
    from zarr.storage import StoreLike

    from zopt.io.source_kinds import Source

__all__ = ["zarr_default_bytes"]

#: raw bytes per task when the array is unsharded (chunks are grouped into tasks of about this)
TASK_BYTES = 64 * 1024 * 1024


def _grids(array: zarr.Array[Any]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """(inner chunk shape, shard shape or None) of a stored array."""
    from zopt.compat.zarr_compat import chunk_shape_of
    from zopt.store.shards import layout_of

    layout = layout_of(array)
    outer = chunk_shape_of(array.metadata)
    if layout is None:
        return outer, None
    return tuple(layout.inner_shape), outer


def _task_shape(shape: tuple[int, ...], inner: tuple[int, ...], shard: tuple[int, ...] | None,
                itemsize: int) -> tuple[int, ...]:
    if shard is not None:
        return shard
    out, budget = [], max(1, TASK_BYTES // (itemsize * math.prod(inner)))
    for s, c in reversed(list(zip(shape, inner, strict=True))):  # whole chunks, last dimensions first
        n = max(1, min(math.ceil(s / c), budget))
        out.append(n * c)
        budget = max(1, budget // n)
    return tuple(reversed(out))


@with_zopt_pipeline
def _region_bytes(store: StoreLike, name: str, region: tuple[slice, ...], inner: tuple[int, ...],
                  shard: tuple[int, ...] | None, source: str | Source | None = None, job_id: str | None = None) -> int:
    """Bytes zarr's default codecs store for ``region`` (shard- or chunk-aligned) of an array: its
    values in ``store``, or with ``source`` the same variable's values there."""
    from zarr.core.metadata import ArrayV3Metadata
    from zarr.storage import MemoryStore

    from zopt.errors import OptionError

    src = zarr.open_array(store, path=name, mode="r")
    if not isinstance(src.metadata, ArrayV3Metadata):
        raise OptionError("store", f"{name!r} is a Zarr v2 array; the baseline is of Zarr v3 arrays")
    if source is None:
        values = np.asarray(src[region])
    else:
        from zopt.io.sources import read_source

        values = np.asarray(read_source(source, name, region, job_id), dtype=src.dtype)
    stored: dict[str, Any] = {}
    out = zarr.create_array(MemoryStore(stored), shape=values.shape, dtype=src.metadata.data_type, chunks=inner, shards=shard,
                            fill_value=src.metadata.fill_value)
    out[...] = values
    return sum(len(v) for k, v in stored.items() if not k.endswith("zarr.json"))


def zarr_default_bytes(store: str | os.PathLike[str] | Any, names: Sequence[str], scheduler: str | None = None,
                       source: str | os.PathLike[str] | Any = None,
                       progress: Callable[[int], Any] | None = None) -> dict[str, int]:
    """Bytes zarr's default codecs would store for each array ``names`` of the Zarr v3 ``store``
    (a local path, a URL or a zarr Store), on its own inner chunks and shards.

    source : the job's source (what ``zopt.io.sources.read_source`` reads: a path, a URL, files
        combined); the arrays with a ``zopt_lossy`` attribute are encoded from its values.
    progress : ``progress(n_tasks)``, a progress bar over the tasks (``zopt.compat.scheduling.compute``), or None.

    One Dask task per shard (or per ~64 MiB of chunks when unsharded), run on ``scheduler`` as
    ``zopt.job.recompress`` runs its own. Returns ``{name: bytes}``; 0-d arrays are skipped.
    """
    import uuid

    import dask

    from zopt.compat.job_cache import release_job
    from zopt.compat.scheduling import compute

    job_id = f"baseline-{uuid.uuid4().hex[:12]}"  # the sources the tasks open, closed at the end
    store = os.fspath(store) if isinstance(store, str | os.PathLike) else store
    tasks = []
    for name in names:
        array = zarr.open_array(store, path=name, mode="r")
        if array.ndim == 0:
            continue
        inner, shard = _grids(array)
        step = _task_shape(tuple(array.shape), inner, shard, array.dtype.itemsize)
        original = source if source is not None and "zopt_lossy" in array.attrs else None
        if isinstance(original, os.PathLike):
            original = os.fspath(original)
        for start in np.ndindex(*(math.ceil(s / k) for s, k in zip(array.shape, step, strict=True))):
            region = tuple(slice(i * k, min((i + 1) * k, s)) for i, k, s in zip(start, step, array.shape, strict=True))
            tasks.append((name, dask.delayed(_region_bytes, pure=True)(store, name, region, inner, shard, original,
                                                                        job_id)))
    out = dict.fromkeys(names, 0)
    try:
        results = compute([t for _, t in tasks], scheduler, progress, job_id)
    finally:
        release_job(job_id)  # this process's (local schedulers); workers release their own
    for (name, _), n in zip(tasks, results, strict=True):
        out[name] += n
    return out
