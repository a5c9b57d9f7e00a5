"""``zopt compact``: rewrite fixed-slot shards packed, one Dask task per shard.

Each task reads one shard file's index, and when the shard is not packed already, copies its
inner chunks' bytes unchanged into a packed shard (C order, index rewritten, same
``index_location``) written to a temporary file and renamed over the shard (``os.replace``),
so readers see either the old or the new shard. The encoded chunks are not decoded, so
compaction is exact by construction and needs no codec but the index codecs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from zopt.shards import ShardLayout, allocated_bytes, classify, compact_shard, layout_of, read_index

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

    def total(self, attr: str) -> int:
        return sum(getattr(a, attr) for a in self.arrays)

    @property
    def mb_per_s(self) -> float:
        """Apparent bytes read per second (MB = 10^6 bytes)."""
        return self.total("apparent_before") / 1e6 / self.seconds if self.seconds else float("inf")


def _compact_one(path: str, layout: ShardLayout, key: str) -> dict[str, int]:
    """Dask task: compact one shard file unless it is packed already."""
    size = os.path.getsize(path)
    table = read_index(path, layout, key)
    if classify(table, layout, size) == "compact":
        alloc = allocated_bytes(path)
        return {"apparent_before": size, "allocated_before": alloc, "apparent_after": size,
                "allocated_after": alloc, "compacted": 0}
    return {**compact_shard(path, layout, key, table), "compacted": 1}


def compact(
    store: str | os.PathLike,
    arrays: Sequence[str] | None = None,
    *,
    scheduler: str | None = None,
    progress: Callable[[int], Any] | None = None,
) -> CompactReport:
    """Rewrite every non-packed shard of the sharded arrays of a local store packed.

    store : a local Zarr v3 store directory; arrays : array paths (default: all).
    scheduler : as for ``zopt.engine.recompress``; progress : context-manager factory called
    with the number of shard files. Unsharded arrays are skipped. Returns a ``CompactReport``.
    Raises ValueError for unknown arrays, ShardIndexError naming a shard whose index does not
    match its file (that shard is left as it was).
    """
    import dask

    from zopt.info import arrays_in, chunk_files
    from zopt.scheduling import compute

    t0 = time.perf_counter()
    store = os.fspath(store)
    report = CompactReport(store=store)
    tasks = []
    for array in arrays_in(store, arrays):
        layout = layout_of(array)
        if layout is None:
            continue
        entry = ArrayCompaction(name=array.path or "/")
        report.arrays.append(entry)
        for coords, path in chunk_files(store, array):
            key = os.path.relpath(path, store)
            name = f"zopt-shard-compact-{entry.name}-{'.'.join(map(str, coords))}"
            tasks.append((entry, dask.delayed(_compact_one, pure=False)(str(path), layout, key, dask_key_name=name)))
    results = compute([t for _, t in tasks], scheduler, progress)
    for (entry, _), res in zip(tasks, results, strict=True):
        entry.shards += 1
        entry.compacted += res["compacted"]
        for k in ("apparent_before", "allocated_before", "apparent_after", "allocated_after"):
            setattr(entry, k, getattr(entry, k) + res[k])
    report.seconds = time.perf_counter() - t0
    return report
