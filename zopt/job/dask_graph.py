"""The Dask graph of a recompress job, built from its checked plan of work, and its run.

One graph layer per packed array (``zopt.job.graph.shard_tasks``), a writer per chunk for unsharded
arrays, writers + a finalize per fixed-slot shard, encoders + an assembly per packed shard split
below the shard (``zopt.job.work.encode_parts``); keys are named by ``zopt.job.graph``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from zopt.compat.scheduling import compute
from zopt.job.graph import job_key, shard_tasks, unit_key
from zopt.job.opening import ProgressFactory, WriteRun
from zopt.job.reports import ArrayReport
from zopt.job.tasks import (
    ChunkJob,
    Masks,
    ShardJob,
    assemble_shard,
    encode_shard_part,
    finalize_shard,
    rewrite_chunk_in_place,
    rewrite_shard_in_place,
    write_packed_shard,
    write_region,
    write_slot_part,
)
from zopt.store.journal import InPlaceJournal, Journal
from zopt.store.shards import ShardLayout, v3_metadata

if TYPE_CHECKING:
    import zarr
    from dask.delayed import Delayed
    from zarr.abc.store import Store

    from zopt.codecs.decisions import DecisionLike
    from zopt.planning.plan import ArrayPlan

__all__ = ["InPlaceRun", "WriteTarget", "in_place_tasks", "run_writes", "write_tasks"]


class _Marks(Protocol):
    def marker(self, name: str, coords: tuple[int, ...]) -> str | None: ...


class WriteTarget(Protocol):
    """What ``write_tasks`` writes into (a ``zopt.job.destinations.Target``): ``root``, a local
    directory or a zarr Store; ``store``, the Store shards are put into whole (None: files at
    paths); ``journal``, where each unit marks itself done (None: not resumed);
    ``shard_dir(name)``, the directory (or key prefix) of array ``name``."""

    @property
    def root(self) -> str | Store | None: ...

    @property
    def store(self) -> Store | None: ...

    @property
    def journal(self) -> _Marks | None: ...

    def shard_dir(self, name: str) -> str: ...


def write_tasks(run: WriteRun, target: WriteTarget) -> list[tuple[str, Delayed]]:
    """``(array name, Delayed)`` for every write unit left in ``run.work``, writing into ``target``
    (``zopt.job.targets``); each unit marks itself done in the target's journal, if any."""
    import dask

    work, src, decision, job_id, lossy = run.work, run.src, run.decision, run.job_id, run.lossy
    journal = target.journal
    tasks: list[tuple[str, Delayed]] = []
    for name, w in work.arrays.items():
        def marker(coords: tuple[int, ...], name: str = name) -> str | None:
            return journal.marker(name, coords) if journal is not None else None

        if w.shard_layout is None:  # unsharded: a chunk per task
            chunk_job = dask.delayed(ChunkJob(src, name, target.root, decision, w.plan, job_id, lossy.get(name)),
                                     traverse=False, name=job_key(name, job_id))
            for coords in w.pending:
                tasks.append((name, dask.delayed(write_region, pure=False)(
                    chunk_job, w.region(coords), marker=marker(coords),
                    dask_key_name=unit_key("chunk", name, coords, job_id))))
            continue
        shard_job = ShardJob(src, name, target.shard_dir(name), w.shard_layout, w.shape, decision, job_id,
                             w.chunk_key_encoding, w.plan, target.store, lossy.get(name), w.copy)
        if w.layout == "compact" and not w.parts:  # one graph layer for the array's shards (zopt.job.graph)
            units = [(unit_key("shard", name, coords, job_id), coords, marker(coords)) for coords in w.pending]
            tasks.extend((name, t) for t in shard_tasks(write_packed_shard, shard_job, job_key(name, job_id), units))
            continue
        shared = dask.delayed(shard_job, traverse=False, name=job_key(name, job_id))
        # a shard split in parts: a task per part (compact: encoders; fixed-slot: slot writers), then
        # one task writing the shard from them (compact: the assembly; fixed-slot: the finalize)
        part_task, part_kind, shard_task = ((encode_shard_part, "part", assemble_shard) if w.layout == "compact"
                                            else (write_slot_part, "slots", finalize_shard))
        for coords in w.pending:
            parts = [dask.delayed(part_task, pure=False)(shared, coords, p,
                                                         dask_key_name=unit_key(part_kind, name, coords, job_id, p[0]))
                     for p in w.parts]
            tasks.append((name, dask.delayed(shard_task, pure=False)(
                shared, coords, *parts, marker=marker(coords), dask_key_name=unit_key("shard", name, coords, job_id))))
    return tasks


@dataclass(frozen=True)
class InPlaceRun:
    """One ``recompress_in_place`` job: its local ``store``, ``decision``, job id ``job``, temporary
    directory ``tmp_dir`` (inside the store, under its lock) and journal ``resume``."""

    store: str
    decision: DecisionLike
    job_id: str
    tmp_dir: str
    resume: InPlaceJournal


def in_place_tasks(run: InPlaceRun, name: str, array: zarr.Array[Any], shard_layout: ShardLayout | None,
                   plan: ArrayPlan | None, report: ArrayReport
                   ) -> tuple[list[tuple[str, Delayed]], list[tuple[str, ShardLayout, str]]]:
    """``recompress_in_place``'s tasks for one array of the local store ``run.store``: one per stored
    shard (chunk when unsharded; absent ones stay absent), and ``(path, layout, key)`` of each shard.

    plan : the array's ``ArrayPlan`` or None. ``run.resume`` (``zopt.store.journal.InPlaceJournal``):
    a unit an interrupted run of the same job finished (its marker matches the file) gets no
    task, and its masks and chunks go into ``report``; every other task writes its marker after
    its rename.
    """
    store, decision, job_id, tmp_dir, resume = run.store, run.decision, run.job_id, run.tmp_dir, run.resume
    import dask

    tasks: list[tuple[str, Delayed]] = []
    shards: list[tuple[str, ShardLayout, str]] = []
    write: Callable[..., tuple[Masks, int]]
    first: tuple[object, ...]
    if shard_layout is None:
        write, first = rewrite_chunk_in_place, (store, name)
    else:
        write, first = rewrite_shard_in_place, (dask.delayed(
            ShardJob(store, name, os.path.join(store, name), shard_layout, tuple(array.shape), decision, job_id,
                     v3_metadata(array).chunk_key_encoding, plan),
            traverse=False, name=job_key(name, job_id),
        ),)
    extra = (decision, plan) if shard_layout is None else ()
    after = (job_id,) if shard_layout is None else ()  # an unsharded array is opened once per process and job
    done = resume.done(name)
    for coords in np.ndindex(*array.cdata_shape):
        key = f"{name}/{array.metadata.encode_chunk_key(coords)}"
        path = os.path.join(store, *key.split("/"))
        if os.path.exists(path):
            found = done.get(Journal.key(coords))
            if found is not None:  # finished by an interrupted run of this job
                report.masks.update(found[0])
                report.chunks_written += found[1]
                report.units_resumed += 1
            else:
                tasks.append((name, dask.delayed(resume.task, pure=False)(
                    write, path, resume.marker(name, coords), *first, coords, *extra, tmp_dir, *after,
                    dask_key_name=unit_key("inplace", name, coords, job_id))))
            if shard_layout is not None:
                shards.append((path, shard_layout, key))
    return tasks, shards


def run_writes(tasks: list[tuple[str, Delayed]], reports: dict[str, ArrayReport],
               measure: Callable[[str], tuple[int, int]], scheduler: str | None, progress: ProgressFactory | None,
               job_id: str | None = None) -> float:
    """Compute ``(array name, write task)`` pairs, add each task's ``(masks, chunks written)`` to
    its array's report, then measure (``measure(name)``: apparent and allocated bytes) what every
    array stores. Returns the graph's wall time in seconds."""
    t_graph = time.perf_counter()
    results = compute([t for _, t in tasks], scheduler, progress, job_id)
    graph_seconds = time.perf_counter() - t_graph
    for (name, _), (masks, n) in zip(tasks, results, strict=True):
        reports[name].masks.update(masks)
        reports[name].chunks_written += n
    for name, rep in reports.items():
        rep.stored_after, rep.allocated_after = measure(name)
    return graph_seconds
