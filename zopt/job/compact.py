"""``zopt compact``: rewrite fixed-slot shards packed, one Dask task per shard.

Each task reads one shard file's index, and when the shard is not packed already, copies its
inner chunks' bytes unchanged into a packed shard (C order, index rewritten, same
``index_location``) written to a temporary file in the job's directory and renamed over the
shard (``os.replace``). The new file keeps the old size (a hole) and no chunk starts where
another one did, so a reader pairing the old index with the new file gets an error, not wrong
values (``zopt.store.rewrite``); after a grace period a second pass drops the holes. The encoded
chunks are not decoded, so compaction is exact by construction and needs no codec but the
index codecs. The job holds the store's lock (``zopt.store.lock``) throughout.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.errors import OptionError
from zopt.notes import Note
from zopt.store.lock import store_lock
from zopt.store.rewrite import (
    GRACE_SECONDS,
    has_inner_checksum,
    rewrite_shard,
    shrink_shard,
    slack,
    unchecked_note,
)
from zopt.store.shards import EMPTY, ShardLayout, allocated_bytes, is_packed, layout_of, read_index

__all__ = ["ArrayCompaction", "CompactReport", "compact"]


@dataclass
class ArrayCompaction:
    """What compaction did to one array. Sizes in bytes (apparent = file sizes, allocated =
    disk blocks), ``shards`` = shard files seen, ``compacted`` = files rewritten."""

    name: str
    shards: int = 0
    compacted: int = 0
    apparent_before: int = 0
    allocated_before: int = 0
    apparent_after: int = 0
    allocated_after: int = 0


@dataclass
class CompactReport:
    """Per-array results and wall time in seconds."""

    store: str
    arrays: list[ArrayCompaction] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[Note] = field(default_factory=list)  # e.g. arrays whose torn reads cannot be detected

    def total(self, attr: str) -> int:
        return sum(getattr(a, attr) for a in self.arrays)

    @property
    def mb_per_s(self) -> float:
        """Apparent bytes read per second (MB = 10^6 bytes)."""
        return self.total("apparent_before") / 1e6 / self.seconds if self.seconds else float("inf")


@with_zopt_pipeline
def _compact_one(path: str, layout: ShardLayout, key: str, tmp_dir: str) -> dict[str, int]:
    """Dask task (phase A): rewrite one shard file packed unless it is packed already.

    Idempotent: a shard a previous run replaced is packed (perhaps with the hole phase B
    drops) and is left alone. Result: sizes before, ``compacted`` (1 when the file changes in
    phase A or B), ``shrink`` (1 when it has a hole for phase B to drop).
    """
    size, alloc = os.path.getsize(path), allocated_bytes(path)
    table = read_index(path, layout, key)
    res = {"apparent_before": size, "allocated_before": alloc, "compacted": 0}
    if is_packed(table, layout):  # only its hole (if any) to drop: offsets and index stay
        res["shrink"] = res["compacted"] = int(slack(table, layout, size) > 0)
        return res
    with open(path, "rb") as f:
        blob = f.read()
    view = memoryview(blob)
    chunks: dict[int, bytes | memoryview] = {int(i): view[int(table[i, 0]) : int(table[i, 0] + table[i, 1])] for i in np.flatnonzero(table[:, 0] != EMPTY)}
    new_size = rewrite_shard(path, layout, chunks, tmp_dir, table, size)
    res.update(compacted=1, shrink=int(new_size > 0 and slack(read_index(path, layout, key), layout, new_size) > 0))
    return res


@with_zopt_pipeline
def _shrink_one(path: str, layout: ShardLayout, key: str, tmp_dir: str) -> dict[str, int]:
    """Dask task (phase B): drop the hole of a shard rewritten in phase A."""
    if os.path.exists(path):
        shrink_shard(path, layout, tmp_dir, key)
        return {"apparent_after": os.path.getsize(path), "allocated_after": allocated_bytes(path)}
    return {"apparent_after": 0, "allocated_after": 0}


@with_zopt_pipeline
def compact(
    store: str | os.PathLike[str],
    arrays: Sequence[str] | None = None,
    *,
    scheduler: str | None = None,
    progress: Callable[[int], Any] | None = None,
    grace: float = GRACE_SECONDS,
) -> CompactReport:
    """Rewrite every non-packed shard of the sharded arrays of a local store packed.

    store : a local Zarr v3 store directory; arrays : array paths (default: all).
    scheduler : as for ``zopt.job.recompress``; progress : context-manager factory called
    with the number of shard files. grace : seconds between replacing the shards (sizes kept,
    see ``zopt.store.rewrite``) and dropping their holes; a reader holding an index for longer may
    read past a shard's new end. Unsharded arrays are skipped. Returns a ``CompactReport``.
    Raises ValueError for unknown arrays, ShardIndexError naming a shard whose index does not
    match its file (that shard is left as it was), StoreLockedError when another job is
    rewriting the store.
    """
    import dask

    from zopt.compat.scheduling import compute
    from zopt.io.sources import arrays_in
    from zopt.store.files import chunk_files

    if not grace >= 0:
        raise OptionError("grace", f"{grace!r} must be a number of seconds >= 0")
    t0 = time.perf_counter()
    store = os.fspath(store)
    report = CompactReport(store=store)
    job_id = uuid.uuid4().hex[:12]
    with store_lock(store, job_id) as tmp_dir:
        tasks, shards = [], []
        for array in arrays_in(store, arrays):
            layout = layout_of(array)
            if layout is None:
                continue
            entry = ArrayCompaction(name=array.path or "/")
            report.arrays.append(entry)
            if not has_inner_checksum(layout):
                report.notes.append(unchecked_note(entry.name))
            for coords, path in chunk_files(store, array):
                key = os.path.relpath(path, store)
                name = f"zopt-shard-compact-{entry.name}-{'.'.join(map(str, coords))}-{job_id}"
                shards.append((entry, str(path), layout, key))
                tasks.append(dask.delayed(_compact_one, pure=False)(str(path), layout, key, str(tmp_dir), dask_key_name=name))
        results = compute(tasks, scheduler, progress)
        holes = [s for s, res in zip(shards, results, strict=True) if res["shrink"]]
        if holes:
            time.sleep(grace)
            compute([dask.delayed(_shrink_one, pure=False)(p, lay, key, str(tmp_dir), dask_key_name=f"zopt-shrink-{key}-{job_id}")
                      for _, p, lay, key in holes], scheduler, None)
    if not report.arrays:
        report.notes.append(Note(f"nothing to compact: {'none of the arrays named' if arrays else f'no array of {store}'} "
                                 "is sharded", "compact"))
    elif not any(res["compacted"] for res in results):
        report.notes.append(Note("nothing to compact: every shard is already packed", "compact"))
    for (entry, shard_path, _, _), res in zip(shards, results, strict=True):
        entry.shards += 1
        entry.compacted += res["compacted"]
        entry.apparent_before += res["apparent_before"]
        entry.allocated_before += res["allocated_before"]
        if os.path.exists(shard_path):
            entry.apparent_after += os.path.getsize(shard_path)
            entry.allocated_after += allocated_bytes(shard_path)
    report.seconds = time.perf_counter() - t0
    return report
