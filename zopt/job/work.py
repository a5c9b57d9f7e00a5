"""The plan of work of a recompress job: what every array's tasks will do, built and checked
before anything is written.

Like cubed, which checks each operation's ``projected_mem`` before it executes, and rechunker,
which returns a plan before running it: ``build_work`` takes the source's description, each
array's chunk and shard shapes and its target metadata (made in memory, see
``zopt.job.targets.target_arrays``) and gives per array its shard layout, write units
(shards, or chunks when unsharded) left to do, slot parts, task count and projected memory per
task, raising for a plan made for other arrays and for a fixed-slot chain without a size bound.
``Work.over_memory`` names an array whose tasks would exceed ``max_memory``. Nothing here
writes: ``--dry-run`` is this object, reported.

Granularity (issue 34, G4): a job with fewer pending shards than ``TASKS_PER_WORKER`` × the
workers would leave workers idle at its end (a one-shard array is one task whatever the cluster),
so each packed shard is then split below the shard: ``encode_parts`` gives slabs of inner-chunk
rows (as fixed-slot writers take), each encoded by its own task, and one assembly task per shard
packs the parts and writes the shard (``zopt.job.tasks.encode_shard_part``, ``assemble_shard``).
"""

from __future__ import annotations

import collections
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import zarr
    from zarr.core.chunk_key_encodings import ChunkKeyEncoding

    from zopt.planning.chunking import ShapeSpec
    from zopt.planning.plan import ArrayPlan
    from zopt.store.reshard import ChunkCopier

import numpy as np

from zopt.codecs.conditional import conditional_codecs_in
from zopt.io.sources import SourceVariable
from zopt.planning.chunking import variable_layout
from zopt.planning.plan import Plan, PlanMismatchError
from zopt.store.journal import Journal
from zopt.store.shards import ShardLayout, layout_of, v3_metadata

__all__ = [
    "LAYOUTS", "MIN_PART_BYTES", "SLOT_TASK_BYTES", "TASKS_PER_WORKER", "ArrayWork", "Work", "WorkOptions", "build_work",
    "default_workers", "encode_parts", "layouts_for", "plan_for", "projected_task_bytes", "slot_parts", "split_axis",
]

#: shard layouts ``recompress`` writes (see ``zopt.store.shards``)
LAYOUTS = ("compact", "fixed-slot")
#: default raw bytes per fixed-slot writer task
SLOT_TASK_BYTES = 16 * 1024 * 1024
#: packed shards are split when the job has fewer pending shards than this many per worker (G4)
TASKS_PER_WORKER = 4
#: raw bytes below which a shard part is not worth a task of its own
MIN_PART_BYTES = 4 * 1024 * 1024


def split_axis(layout: ShardLayout) -> int:
    """The first axis along which a shard holds more than one inner chunk (0 if none)."""
    cps = layout.chunks_per_shard
    return next((a for a, n in enumerate(cps) if n > 1), 0)


def slot_parts(layout: ShardLayout, parts: int | None) -> list[tuple[int, int]]:
    """Split a shard's inner-chunk rows along its first split axis into ``parts`` slabs.

    Default: slabs of about ``SLOT_TASK_BYTES`` of raw data, at least 2 when possible."""
    n_rows = layout.chunks_per_shard[split_axis(layout)]
    if parts is None:
        itemsize = layout.inner_encoder().spec.dtype.to_native_dtype().itemsize
        shard_bytes = math.prod(layout.shard_shape) * itemsize
        parts = max(2, math.ceil(shard_bytes / SLOT_TASK_BYTES))
    parts = max(1, min(parts, n_rows))
    bounds = np.linspace(0, n_rows, parts + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def encode_parts(layout: ShardLayout, pending: int, workers: int) -> list[tuple[int, int]]:
    """The slabs of inner-chunk rows (``slot_parts``) a packed shard is encoded in when the job has
    ``pending`` shards left for ``workers`` workers: none (one task per shard) when ``pending`` is at
    least ``TASKS_PER_WORKER * workers``; else enough parts per shard for that many tasks, each at
    least one row of inner chunks and about ``MIN_PART_BYTES`` of raw data."""
    if pending <= 0 or pending >= TASKS_PER_WORKER * workers:
        return []
    rows = layout.chunks_per_shard[split_axis(layout)]
    itemsize = layout.inner_encoder().spec.dtype.to_native_dtype().itemsize
    shard_bytes = math.prod(layout.shard_shape) * itemsize
    parts = min(rows, math.ceil(TASKS_PER_WORKER * workers / pending), max(1, shard_bytes // MIN_PART_BYTES))
    return slot_parts(layout, parts) if parts > 1 else []


def default_workers() -> int:
    """The workers of Dask's local schedulers: ``num_workers`` of Dask's configuration, else the
    CPU count (also the estimate used for a cluster, whose size is known only once connected)."""
    import os

    import dask.config

    return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)


def projected_task_bytes(array: zarr.Array[Any], shard_layout: ShardLayout | None, layout: str, slot_parts_: int | None) -> int:
    """Projected peak memory (bytes) of one write task of ``array`` (a zarr array), computed before running.

    Like cubed's ``projected_mem``: decoded input region + compressed input (bounded by the
    decoded size) + encoded output (the slot bound of every inner chunk the task holds; twice
    for a packed shard, which is joined into one buffer) + per-chunk buffers (padded chunk, its
    bytes and two trial encodings: 4 inner chunks). A packed shard whose compressors have no
    known bound assumes they at most double; ``fixed-slot`` needs the bound and raises
    ValueError naming the codec without one.
    """
    itemsize = array.dtype.itemsize
    if shard_layout is None:
        chunk = math.prod(array.chunks) * itemsize
        return 2 * chunk + chunk + 4 * chunk
    inner = math.prod(shard_layout.inner_shape) * itemsize
    if layout == "fixed-slot":
        slot = shard_layout.slot_size  # raises ValueError naming a codec without a bound
        parts = slot_parts(shard_layout, slot_parts_)
        rows = max(b - a for a, b in parts)
        n_rows = shard_layout.chunks_per_shard[split_axis(shard_layout)]
        n_chunks = math.ceil(shard_layout.n_inner * rows / n_rows)
        region = n_chunks * inner
        return 2 * region + n_chunks * slot + 4 * inner
    try:
        slot = shard_layout.slot_size
    except ValueError:
        slot = 2 * inner  # compressors without a known bound: assume they at most double
    region = shard_layout.n_inner * inner
    return 2 * region + 2 * shard_layout.n_inner * slot + 4 * inner


def plan_for(plan: Plan, name: str, array: zarr.Array[Any], inner: tuple[int, ...]) -> ArrayPlan:
    """The ``ArrayPlan`` of array ``name``, checked against its target ``array`` (a zarr array):
    PlanMismatchError for a plan without it or made for another grid, chain, shape or dtype."""
    if name not in plan.arrays:
        raise PlanMismatchError(
            f"plan: no masks for array {name!r} (the plan covers {sorted(plan.arrays)}); "
            "plan every rewritten array or restrict the rewrite with --variable"
        )
    ap = plan.arrays[name]
    found = conditional_codecs_in(v3_metadata(array).codecs)
    if not found and ap.chain is not None and not any(c["name"] == "conditional" for c in ap.chain):
        # the plan chose a chain without masks (zopt.planning.optimizer): its grid, shape, dtype and content still hold
        ap.check(tuple(array.shape), inner, ap.codecs, ap.header_bits, str(array.dtype))
        return ap
    if not found:
        raise PlanMismatchError(f"plan: the target chain of {name!r} has no conditional codec to apply masks to")
    if ap.chain is not None and not any(c["name"] == "conditional" for c in ap.chain):
        chosen = (ap.choice or {}).get("candidate", json.dumps(ap.chain))
        raise PlanMismatchError(f"plan: it chose the chain {chosen} for {name!r}, which has no conditional codec and so no "
                                "masks, but the target chain has one (--codecs, or a store rewritten --in-place): "
                                "write with the plan's chain (recompress --plan, no --codecs), or make the plan with "
                                "--menu classic")
    ap.check(tuple(array.shape), inner, [c.to_dict() for c in found[0].codecs], found[0].header_bits, str(array.dtype))
    ap.validate()
    return ap


def layouts_for(source: dict[str, SourceVariable], names: Sequence[str], chunks: ShapeSpec, shards: ShapeSpec,
                plan: Plan | None,
                explicit: Sequence[str] | None) -> dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]]:
    """``{name: (inner chunk shape, shard shape or None)}`` (``zopt.planning.chunking.variable_layout``)."""
    return {name: variable_layout(name, source[name], chunks, shards, plan, explicit) for name in names}


@dataclass
class ArrayWork:
    """The work of one array: ``units`` write units (shards; chunks when unsharded) on a grid,
    ``pending`` the coordinates of those left to write, in C order."""

    name: str
    shape: tuple[int, ...]
    inner: tuple[int, ...]
    shard: tuple[int, ...] | None
    layout: str  # "compact", "fixed-slot" or "unsharded"
    shard_layout: ShardLayout | None
    chunk_key_encoding: ChunkKeyEncoding  # the target array's
    plan: ArrayPlan | None  # checked against this array
    parts: list[tuple[int, int]]  # fixed-slot, or a packed shard split (G4): the slabs of inner-chunk rows each task takes
    projected_task_bytes: int
    units: int
    pending: list[tuple[int, ...]]
    resumed_masks: collections.Counter[int] = field(default_factory=collections.Counter)  # of units already done
    resumed_chunks: int = 0
    copy: ChunkCopier | None = None  # encoded source chunks copied into the shards (issue 34 G5)

    @property
    def units_resumed(self) -> int:
        return self.units - len(self.pending)

    @property
    def tasks(self) -> int:
        """Dask tasks of this array in this run (a fixed-slot shard: its writers + a finalize; a
        split packed shard: its encoders + an assembly)."""
        return len(self.pending) * (1 + len(self.parts))

    def region(self, coords: tuple[int, ...]) -> tuple[slice, ...]:
        """The region of unit ``coords`` (a chunk of an unsharded array, or a shard)."""
        step = self.shard or self.inner
        return tuple(slice(i * k, min((i + 1) * k, s)) for i, k, s in zip(coords, step, self.shape, strict=True))


@dataclass
class Work:
    """The checked plan of work of one job: an ``ArrayWork`` per rewritten array, in order."""

    arrays: dict[str, ArrayWork]

    def over_memory(self, max_memory: int | None) -> ArrayWork | None:
        """The first array whose write task's projected peak memory exceeds ``max_memory`` bytes, or None."""
        if max_memory is None:
            return None
        return next((w for w in self.arrays.values() if w.projected_task_bytes > max_memory), None)


@dataclass(frozen=True)
class WorkOptions:
    """How ``build_work`` cuts the arrays into tasks: the shard ``layout`` (``LAYOUTS``), the
    fixed-slot writers per shard ``slot_parts`` (None: ``slot_parts``' default), the job's ``plan``
    (None: none) and the ``workers`` that will run it (None: ``default_workers()``)."""

    layout: str = "compact"
    slot_parts: int | None = None
    plan: Plan | None = None
    workers: int | None = None


def build_work(names: Sequence[str], source: dict[str, SourceVariable],
               layouts: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]], targets: dict[str, zarr.Array[Any]],
               options: WorkOptions = WorkOptions(),
               done: Callable[[str], Mapping[str, tuple[Mapping[int, int], int]]] | None = None) -> Work:
    """The plan of work for arrays ``names``: ``targets`` holds each one's target zarr array
    (its metadata, in memory), ``done(name)`` the journal markers of units an interrupted run
    finished (``{unit key: (masks, chunks)}``), ``options`` the layout, slot parts, plan and workers:
    packed shards are split below the shard when the job's pending shards are too few for the
    workers (``encode_parts``). Raises PlanMismatchError (``plan_for``) and ValueError for a
    fixed-slot chain without a size bound, before anything is written."""
    layout, slot_parts_, plan, workers = options.layout, options.slot_parts, options.plan, options.workers
    arrays = {}
    for name in names:
        inner, shard = layouts[name]
        target = targets[name]
        shard_layout = layout_of(target) if shard else None
        kind = layout if shard else "unsharded"
        array_plan = plan_for(plan, name, target, inner) if plan is not None else None
        shape = tuple(source[name].shape)
        w = ArrayWork(
            name=name, shape=shape, inner=tuple(inner), shard=tuple(shard) if shard else None, layout=kind,
            shard_layout=shard_layout, chunk_key_encoding=v3_metadata(target).chunk_key_encoding, plan=array_plan,
            parts=slot_parts(shard_layout, slot_parts_) if kind == "fixed-slot" and shard_layout is not None else [],
            projected_task_bytes=projected_task_bytes(target, shard_layout, kind, slot_parts_), units=0, pending=[],
        )
        finished = done(name) if done is not None else {}
        for coords in np.ndindex(*(math.ceil(s / k) for s, k in zip(shape, shard or inner, strict=True))):
            w.units += 1
            found = finished.get(Journal.key(coords)) if finished else None
            if found is None:
                w.pending.append(coords)
            else:
                w.resumed_masks.update(found[0])
                w.resumed_chunks += found[1]
        arrays[name] = w
    packed = [w for w in arrays.values() if w.layout == "compact"]
    pending = sum(len(w.pending) for w in arrays.values())
    if packed:
        workers = workers or default_workers()
        for w in packed:
            if w.shard_layout is not None:  # a packed array is sharded
                w.parts = encode_parts(w.shard_layout, pending, workers)
    return Work(arrays)
