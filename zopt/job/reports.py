"""What a recompress run did: one ``ArrayReport`` per array, gathered in a ``RecompressReport``."""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any

from zopt.notes import Note

__all__ = ["ArrayReport", "RecompressReport"]


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
    masks: collections.Counter[int] = field(default_factory=collections.Counter)
    seconds: float = 0.0
    layout: str = "compact"  # compact, fixed-slot or unsharded
    allocated_after: int = 0  # bytes on disk (less than stored_after for sparse slot files)
    projected_task_bytes: int = 0  # projected peak memory of one task (see zopt.job.work.projected_task_bytes)
    units: int = 0  # write units (shards; chunks when unsharded), each one marked done in the journal
    units_resumed: int = 0  # units an interrupted run of the same job had finished: skipped
    tasks: int = 0  # Dask tasks of this array in this run
    copied: bool = False  # its shards hold the source's encoded chunks, copied (zopt.store.reshard)

    @property
    def ratio(self) -> float:
        return self.logical_bytes / self.stored_after if self.stored_after else math.inf


@dataclass
class RecompressReport:
    """Per-array reports, the destination (a path, or a store's URL), wall time in seconds of the
    whole run and of the Dask graph alone (``graph_seconds``: reading, encoding and writing,
    without metadata and setup), the source's bytes, ``notes`` on what was done differently
    from what was asked, and ``readers``: one line naming the readers that open the store, derived
    from every array's codecs and data type (``zopt.planning.readers.reader_line``)."""

    dst: str
    arrays: list[ArrayReport]
    seconds: float
    source_bytes: int | None = None
    graph_seconds: float = 0.0
    notes: list[Note] = field(default_factory=list)  # what the run did differently from what was asked, and why
    job: Any = None  # the RecompressJob that made it (zopt.job.options)
    skipped: list[str] = field(default_factory=list)  # broken source arrays left out (skip_broken)
    #: which readers open the written store (``zopt.planning.readers.reader_line``): the summary's last line
    readers: str | None = None

    @property
    def logical_bytes(self) -> int:
        return sum(a.logical_bytes for a in self.arrays)

    @property
    def stored_after(self) -> int:
        return sum(a.stored_after for a in self.arrays)

    @property
    def mb_per_s(self) -> float:
        return self.logical_bytes / 1e6 / self.seconds if self.seconds else math.inf

    def masks(self) -> collections.Counter[int]:
        total: collections.Counter[int] = collections.Counter()
        for a in self.arrays:
            total.update(a.masks)
        return total
