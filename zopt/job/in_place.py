"""``recompress_in_place``: re-decide the masks of a store's ``conditional`` codecs, shard by shard,
each shard replaced atomically, no metadata changed (write fast, compress later)."""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from zopt.codecs.conditional import conditional_codecs_in
from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.compat.scheduling import check_scheduler
from zopt.errors import OptionError
from zopt.io import locations as loc
from zopt.io.paths import resolve
from zopt.io.sources import zarr_v3_group
from zopt.job.dask_graph import InPlaceRun, in_place_tasks, run_writes
from zopt.job.options import RecompressJob, refused_in_place
from zopt.job.progress import parse_progress
from zopt.job.reports import ArrayReport, RecompressReport
from zopt.job.targets import chunk_bytes_stored, stored_sizes
from zopt.job.work import plan_for
from zopt.notes import Note
from zopt.store.journal import InPlaceJournal
from zopt.store.lock import store_lock
from zopt.store.rewrite import GRACE_SECONDS, has_inner_checksum, shrink_after_grace, unchecked_note
from zopt.store.shards import ShardLayout, layout_of, v3_metadata

if TYPE_CHECKING:
    from dask.delayed import Delayed

    from zopt.codecs.decisions import DecisionLike
    from zopt.planning.plan import ArrayPlan, Plan
    from zopt.types import PathLike

__all__ = ["recompress_in_place"]


@with_zopt_pipeline
def recompress_in_place(
    store: str | os.PathLike[str],
    variables: Sequence[str] | None = None,
    *,
    decision: DecisionLike = "compress_if_smaller",
    plan: Plan | PathLike | None = None,
    scheduler: str | None = None,
    progress: object = None,
    grace: float = GRACE_SECONDS,
    **options: object,
) -> RecompressReport:
    """Re-decide the ``conditional`` masks of a store's arrays in place, shard by shard.

    The "write fast, compress later" step: a store written quickly (e.g. ``conditional`` with
    mask 0 everywhere, in fixed slots) is rewritten with per-chunk masks from ``decision`` or a
    ``plan`` (``zopt.planning.plan.Plan`` or a path to one), without changing any metadata: the codec
    chain stays the same, so every shard reads the same before and after. One Dask task per
    shard file (per chunk file for unsharded arrays) reads it through zarr, encodes its inner
    chunks again and replaces it packed and atomically (a temporary file renamed over it), so a
    reader — or an interrupted run — only ever sees whole old or whole new shards. Absent
    shards and chunks (all fill value) stay absent; a chunk whose values equal the fill value is
    removed.

    store : a Zarr v3 group in a local directory.
    variables : arrays to rewrite (default: every array with a ``conditional`` codec).
    decision, plan, scheduler, progress : as for ``recompress``.
    grace : seconds between replacing the shards and dropping the holes that kept their sizes
        (``zopt.store.rewrite``; a reader holding a shard index longer may read past a new end).
    options : any other option of ``recompress`` (``chunks``, ``codecs``, ``combine``, …) is refused
        with a ValueError naming it unless it has its default value: in place every array keeps its
        metadata (``zopt.job.options.refused_in_place``, the list ``--in-place`` refuses too).

    The job holds the store's lock (``zopt.store.lock``); a shard is replaced as ``zopt.store.rewrite``
    describes, so a reader pairing an old index with a new file gets an error, not wrong values,
    when the inner chain ends with ``crc32c`` (``RecompressReport.notes`` names arrays without).
    Resumable: each finished shard (chunk file) gets a marker in ``STORE/.zopt-in-place``
    (``zopt.store.journal.InPlaceJournal``); the same call after an interruption skips the units whose
    marker matches the job and the file (counted in ``ArrayReport.units_resumed``) and rewrites
    the rest; the journal is removed when a run completes.
    Returns a ``RecompressReport`` (``dst`` is ``store``). Raises ValueError when ``store`` is
    not a local Zarr v3 group, or a named array is missing or has no ``conditional`` codec
    (its chunks cannot change without changing its metadata: use ``recompress``), or no array
    has one; ``PlanMismatchError`` for a plan made for other arrays or contents;
    StoreLockedError when another job is rewriting the store.
    """
    _refuse(options)
    if not grace >= 0:
        raise OptionError("grace", f"{grace!r} must be a number of seconds >= 0")
    check_scheduler(scheduler)
    shown = parse_progress(progress)  # as recompress's: None, True, False or a function (zopt.job.progress)
    store = resolve(store)  # on the client: Dask workers may run in another directory
    group = zarr_v3_group(store)
    if group is None:
        raise OptionError("store", f"{store!r} is not a Zarr v3 group in a local directory (in-place rewrites replace files)")
    arrays = dict(group.arrays())
    if isinstance(plan, str | os.PathLike):
        from zopt.planning.plan import Plan

        plan = Plan.load(plan)
    if variables:
        missing = [n for n in variables if n not in arrays]
        if missing:
            raise OptionError("variables", f"{missing} not in the store; it has {sorted(arrays)}")
        names = list(variables)
    else:
        names = [n for n, a in arrays.items() if conditional_codecs_in(v3_metadata(a).codecs)]
        if not names:
            raise OptionError("store", f"no array of {store!r} has a conditional codec, so in place there is nothing to "
                             "re-decide; rewrite it into a new store with recompress SRC DST")
    layouts: dict[str, ShardLayout | None] = {}
    plans: dict[str, ArrayPlan | None] = {}
    for name in names:  # checked before the store is locked or any file touched
        array = arrays[name]
        if not conditional_codecs_in(v3_metadata(array).codecs):
            raise OptionError("variables", f"array {name!r} has no conditional codec, so its chunks cannot change without "
                             "changing its metadata; rewrite it into a new store with recompress SRC DST")
        layout = layouts[name] = layout_of(array)
        inner = layout.inner_shape if layout is not None else tuple(array.chunks)
        plans[name] = plan_for(plan, name, array, inner) if plan is not None else None
    t0 = time.perf_counter()
    source_bytes = loc.total_bytes(store)
    tasks: list[tuple[str, Delayed]] = []
    reports: dict[str, ArrayReport] = {}
    notes: list[Note] = []
    job_id = uuid.uuid4().hex[:12]
    with store_lock(store, job_id) as tmp_dir:
        resume = InPlaceJournal.start(store, names, decision, plan)  # what an interrupted run of this job finished
        shards: list[tuple[str, ShardLayout, str]] = []  # (path, layout, key) of every shard rewritten
        run = InPlaceRun(store, decision, job_id, str(tmp_dir), resume)
        for name in names:
            array, shard_layout = arrays[name], layouts[name]
            inner = shard_layout.inner_shape if shard_layout is not None else tuple(array.chunks)
            reports[name] = ArrayReport(
                name=name, shape=tuple(array.shape), dtype=str(array.dtype),
                chunks=math.prod(math.ceil(s / c) for s, c in zip(array.shape, inner, strict=True)), chunks_written=0,
                logical_bytes=int(array.nbytes), stored_before=chunk_bytes_stored(store, name),
                layout="in place, packed" if shard_layout is not None else "in place, unsharded",
            )
            if shard_layout is not None and not has_inner_checksum(shard_layout):
                notes.append(unchecked_note(name))
            array_tasks, array_shards = in_place_tasks(run, name, array, shard_layout, plans[name], reports[name])
            tasks += array_tasks
            shards += array_shards
        if shown is not None:
            shown.expect_bytes(sum(r.logical_bytes for r in reports.values()))
        try:
            graph_seconds = run_writes(tasks, reports, lambda n: stored_sizes(store, n), scheduler, shown, job_id=job_id)
        finally:
            if shown is not None:
                shown.close()
        if shrink_after_grace(shards, str(tmp_dir), grace, scheduler):
            for name, rep in reports.items():
                rep.stored_after, rep.allocated_after = stored_sizes(store, name)
        resume.remove()  # complete: the next run is a new job
    elapsed = time.perf_counter() - t0
    for rep in reports.values():
        rep.seconds = elapsed
    from zopt.planning.readers import reader_line, store_arrays

    return RecompressReport(dst=store, arrays=list(reports.values()), seconds=elapsed, source_bytes=source_bytes,
                            graph_seconds=graph_seconds, notes=notes, readers=reader_line(store_arrays(store)))


def _refuse(options: dict[str, object]) -> None:
    """ValueError naming the options of ``recompress`` a rewrite in place does not honour; TypeError
    for a name that is no option (as Python says it), or one of this function's own under another name."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(RecompressJob)}
    unknown = [n for n in options if n not in fields or fields[n].metadata.get("in_place", False)]
    if unknown:
        raise TypeError(f"recompress_in_place() got an unexpected keyword argument {unknown[0]!r}")
    refused = refused_in_place(options)
    if refused:
        raise OptionError(refused[0], label=", ".join(refused), message=f"{'does' if len(refused) == 1 else 'do'} not apply to a rewrite in "
                         "place, which keeps every array's metadata and writes no new store; use zopt.recompress "
                         "into a new store to change them")
