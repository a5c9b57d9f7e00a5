"""``recompress`` and ``run_job``: parse → plan of work → validate → target → graph → run → publish → report.

A reader following one array from the CLI to the shard file meets, in order: the job's options
(``options.RecompressJob``), SRC and DST parsed and the plan of work built and checked in memory
(``prepare``: the source described, lossy variables attached, readers and the journal checked,
the chain chosen from the codec menu, ``work``: every refusal — a plan for other arrays,
``max_memory``, a fixed-slot chain without a size bound — raised before the destination or its
partial store exists), the target created (``targets``), the Dask graph (``dask_graph``) of
worker functions (``tasks``), its run (``zopt.compat.scheduling``), each child group's job, the
publish and the report (``reports``). ``recompress_in_place`` lives in ``in_place``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import zarr

from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.compat.job_cache import release_job
from zopt.io.multi import job_source
from zopt.job.destinations import Target, WriteRun
from zopt.job.options import RecompressJob, parse_max_memory
from zopt.job.prepare import Prepared, parse_job, plan_of_work
from zopt.job.reports import RecompressReport
from zopt.job.targets import same_metadata
from zopt.notes import Note
from zopt.store.journal import keeps_partial

__all__ = ["parse_max_memory", "recompress", "recompress_in_place", "run_job"]

from zopt.job.in_place import recompress_in_place  # noqa: E402 - re-exported: the public pair lives together

if TYPE_CHECKING:
    from zopt.codecs.decisions import DecisionLike
    from zopt.job.progress import ProgressEvent
    from zopt.planning.plan import Plan
    from zopt.types import BudgetLike, LossyLike, NamesLike, PathLike


@with_zopt_pipeline
def recompress(
    src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    dst: str | os.PathLike[str],
    *,
    codecs: Sequence[dict[str, Any]] | str | None = None,
    preset: str | None = None,
    chunks: tuple[int, ...] | str | None = None,
    shards: tuple[int, ...] | str | None = None,
    decision: DecisionLike = None,
    variables: Sequence[str] | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    progress: bool | Callable[[ProgressEvent], object] | None = None,
    layout: str = "compact",
    slot_parts: int | None = None,
    plan: Plan | PathLike | None = None,
    plan_force: bool = False,
    max_memory: int | str | None = None,
    dry_run: bool = False,
    lossy: LossyLike = None,
    readers: Sequence[str] | str | None = None,
    checksum: bool | None = None,
    before_publish: Callable[[Any, list[str]], None] | None = None,
    skip_broken: bool = False,
    menu: NamesLike = None,
    budget: BudgetLike = None,
    concat_dim: str | None = None,
    combine: str = "by_coords",
    append: bool = False,
) -> RecompressReport:
    """Rewrite ``src`` into a new Zarr v3 store ``dst`` with the target codec chain.

    Parameters
    ----------
    src : a Zarr v2/v3 store (a group, whose child groups are rewritten too, each like a store of
        its own; or a root array, giving a root array) or a netCDF/HDF5 file (without groups): a
        local path (resolved here, not on Dask workers) or an fsspec URL (``s3://…``, ``gs://…``,
        ``memory://…``, ``file://…``; see ``zopt.io.locations``). Only read. With ``concat_dim``:
        several netCDF/HDF5 files (or Zarr stores) combined along that dimension — a glob
        (``"archive/*.nc"``) or a list of paths, URLs or globs (``zopt.io.multi``: each file's
        metadata read by Dask tasks; different variables, types, fill values or attributes, an
        overlapping or non-increasing coordinate, a pattern matching nothing, or CF packing that
        cannot be re-expressed exactly are refused naming the file, before anything is written).
    dst : the new Zarr v3 store: a local directory path (written under ``dst.zopt-partial`` and
        renamed into place at the end), or a ``zarr.abc.store.Store`` / fsspec URL such as
        ``s3://bucket/x.zarr`` or ``memory://x.zarr``. A store has no positional writes and no
        rename: it is written in place (cleared first, and again on failure), and a
        ``fixed-slot`` layout falls back to packed shards assembled inside one task each, which
        ``RecompressReport.notes`` says. A ``MemoryStore`` is shared by threads only: use the
        threaded or synchronous scheduler with it. Or a branch of an Icechunk repository:
        ``icechunk://PATH[@BRANCH]``, ``icechunk+s3://BUCKET/PREFIX[@BRANCH]`` or an
        ``icechunk.Repository`` (its ``main``), written on a work branch in one commit and
        published by moving the branch (``zopt.job.icechunk_target``, docs/icechunk.md);
        ``zopt.compat.icechunk_compat.RepositoryNotFoundError`` for a missing repository or
        branch, ``BranchMovedError`` if the branch moved during the job.
    codecs : target codec chain (list of codec JSON objects or a JSON string); inside
        ``sharding_indexed`` when sharded. Default: each variable's chain chosen by trial encodings
        from the ``default`` codec menu (``menu``, ``budget``; ``zopt.planning.candidates``) among
        the chains ``readers`` read, e.g. ``numcodecs.pcodec`` level 8 where it pays for its encode
        time (the README's float32 ``air_temperature``);
        ``zopt.planning.menu.default_chain`` for zopt's own data types (``bfloat16``, ``float8_*`` …).
    preset : a named chain and decision instead of ``codecs`` (``zopt presets``;
        ``zopt.planning.presets``); ValueError naming the allowed names, or when both are given.
    chunks, shards : inner chunk and shard shapes: by dimension name (``"y=32,x=32"`` or a dict;
        unnamed dimensions whole, for every variable having one of the names) or positional
        (``"1,32,32"``, for every variable with that many dimensions). Defaults: ~256 KiB inner
        chunks that keep the last dimensions whole (a ``(64, 1024, 1024)`` float32 gets
        ``(1, 64, 1024)``; square tiles for 1-byte and bool types; 1-D coordinates whole), ~64 MiB
        shards; shards are rounded down to a multiple of the inner chunks.
    decision : how ``conditional`` codecs pick masks (see ``zopt.codecs.decisions``); default the
        preset's, else ``"compress_if_smaller"``.
    variables : names to rewrite (default every numeric variable of one dimension or more), a
        child group's as ``"group/name"``; the others are still copied unchanged.
    scheduler : None for Dask's local threaded scheduler, ``"processes"``/``"synchronous"``, or a
        ``dask.distributed`` scheduler address (``tcp://host:8786``).
    overwrite : replace an existing ``dst`` that is a Zarr store: it is renamed to
        ``dst.zopt-replaced``, the new store renamed into place, then the old one deleted
        (``zopt.io.paths.publish``; a job killed in between is finished by the next one on ``dst``).
    progress : None (default): a progress display on stderr when it is a terminal, or in a
        notebook; nothing otherwise. True: the display always; False: nothing. Or a function called
        with each ``zopt.job.progress.ProgressEvent`` (phase ``"planning"``: files read, arrays
        described, arrays trialled; ``"writing"``: shards and logical bytes done, with ``mb_per_s``
        and ``eta``), nothing displayed (docs/progress.md). Anything else: ValueError naming
        ``progress``.
    layout : shard layout, ``"compact"`` (each shard encoded and written packed by one task)
        or ``"fixed-slot"`` (inner chunks of a shard written into fixed slots by
        ``slot_parts`` concurrent tasks, then indexed and renamed by a finalize task; see
        ``zopt.store.shards``). Unsharded arrays ignore it.
    slot_parts : tasks per shard in the fixed-slot layout (default: ~``SLOT_TASK_BYTES`` of
        raw data each, at least 2).
    plan : a ``zopt.planning.plan.Plan`` (or a path to one) deciding the masks instead of ``decision``:
        no trial encoding at write time. Checked before anything is written against each
        rewritten array (grid, codec list, header_bits, shape, dtype; PlanMismatchError before the
        destination or its partial store exists), and chunk by chunk
        against the content it was made for while writing (the partial store is then removed).
    plan_force : with ``plan``: also apply it to the arrays of a Zarr v3 ``src`` it would make worse —
        stored larger by its own estimate, or read by fewer readers (zopt's ``conditional`` where the
        source's chain is plain zarr-python's) — which otherwise keep the source's chain; either
        way a note names each such array (``zopt.job.plan_guard``). ValueError naming
        ``plan_force`` without a plan.
    max_memory : refuse the job (ValueError, before the destination or its partial store exists) when a task's projected
        peak memory exceeds this many bytes (an int, or a string such as ``"2GiB"``).
    lossy : per-variable lossy recompression (``zopt.lossy``): ``["tos=abs:0.01", …]`` or
        ``{"tos": "abs:0.01"}`` (also ``keepbits:K``, ``info:L``, ``info:L:chunk``,
        ``plan:PATH``). Analysed and validated before anything is written; each such variable gets
        its own chain and a ``zopt_lossy`` attribute, and every chunk is checked as written.
    readers : refuse (ValueError, before anything is written) a target chain that one of these
        readers cannot read: ``zopt``, ``zarr-python`` (>= 3.1, no zopt), ``zarr-python-3.2``
        (and ``scale_offset``/``cast_value``), ``tensorstore``, ``zarrs``
        (``zopt.planning.readers``). Without ``codecs`` it narrows the menu instead
        (``zopt.planning.candidates``). Default: plain ``zarr-python`` for the chains the job
        chooses (a store readable without zopt; files packed differently are then
        written as their floats), ``zopt`` with an explicit ``decision``; the report's
        ``readers`` line names who reads what was written.

    checksum : end the inner chain of sharded arrays with ``crc32c`` (4 bytes a chunk), so a
        reader that pairs an old shard index with a rewritten file (``zopt compact``,
        ``--in-place``) gets an error instead of wrong values; default: for ``fixed-slot``
        (the layout written to be rewritten), not for ``compact``. See docs/reliability.md.
    dry_run : build the plan of work (``zopt.job.work``: target metadata in memory) and
        return it without writing anything: the report's arrays give shapes, units (shards), tasks,
        logical and source bytes, projected memory per task, and units an interrupted run of
        the same job already finished (``units_resumed``); ``stored_after`` stays 0.

    concat_dim : the dimension several sources are combined along (required for a list or a glob;
        not with ``lossy`` or ``plan``). Files packed differently (``scale_factor``/``add_offset``)
        are re-expressed in one exact ``scale_offset`` + ``cast_value`` packing (a note says so).
    combine : with ``concat_dim``, how the files are ordered, as ``xarray.open_mfdataset``'s
        ``combine``: ``"by_coords"`` (default: by their first ``concat_dim`` coordinate value,
        overlaps refused) or ``"nested"`` (the order given, a glob sorted by name, whatever the
        coordinate values). ValueError naming ``combine`` for other values, or without
        ``concat_dim``.

    append : with ``concat_dim``, append the files to ``dst``, a local store zopt wrote from files
        combined along that dimension, keeping its chains, inner chunks and shards (``zopt.job.append``,
        docs/append.md): checked against it as against each other, refused naming the files.

    before_publish : called as ``before_publish(partial, names)`` once every write has finished
        and before the publish, with the partial store (a local path, or the zarr Store of a
        store destination) and the names of the arrays written (a child group's as
        ``"group/name"``). If it raises, the partial store is kept as it is (resumable) and the
        exception propagates: e.g. a check of the written values (``zopt verify``).

    menu, budget : without ``codecs`` or ``plan``, each variable's chain is chosen from the codec
        menu (``zopt.planning.candidates``: a menu name or candidate names; default the preset's,
        else ``"default"``) by trial encodings of a few of its chunks within the speed ``budget``
        (``zopt.planning.optimizer``: a number > 0, default 1, or ``"inf"`` for size first); the
        report's notes name each choice. ``menu``/``budget`` with ``codecs`` or a ``plan`` is a
        ValueError.

    skip_broken : a source array whose metadata document is broken (``zopt.io.source_check``) is
        left out and listed in the report's ``skipped``, instead of an error naming the file.

    Resuming (local directory destinations): the job keeps a journal in ``dst.zopt-partial``
    (``zopt.store.journal``). A run killed, preempted or failed for a reason outside the job's inputs
    (a lost worker, an I/O error, Ctrl-C) leaves it; the same call again skips the shards
    already written and publishes as usual. Other options or a changed source raise
    ``zopt.store.journal.ResumeMismatchError`` before anything is touched.

    Returns a ``RecompressReport``. Raises OverlapError (before anything is written) if ``src``
    and ``dst`` overlap; FileExistsError if ``dst`` exists and not ``overwrite``;
    NotAZarrStoreError if it exists and is not a Zarr store; ValueError for a bad codec chain, shape or layout (also for ``fixed-slot``
    with an inner chain whose encoded size has no known bound, naming the codec, before the destination exists).
    ``dst`` is left as it was on any error; the partial store is removed, except when the job can
    resume (see Resuming) or ``before_publish`` refused it (it is kept for inspection).
    """
    options = dict(locals())
    return run_job(RecompressJob.parse(**options))


def run_job(job: RecompressJob, *, child: bool = False) -> RecompressReport:
    """Run one recompress job: parse → plan of work → validate → target → graph → run → publish → report.

    Everything the root group's job refuses is refused before the destination or its partial
    store exists; a child group's job (``RecompressJob.for_child``, ``child=True``: its parent
    holds the lock) checks its own variables when it runs, after the root group's arrays are
    written (the partial store is then removed). A local directory DST is locked
    (``DST.zopt-lock``, ``zopt.store.lock.destination_lock``) from before anything of it is
    created until the job has published or failed: a second job on the same DST raises
    ``StoreLockedError`` naming the first. Errors and the report as ``zopt.recompress``.
    """
    with contextlib.ExitStack() as hold:
        if not child and job.progress is not None:
            job.progress.emit("planning", "reading the source", 0, None)  # at once: the first lines below may take a while
            hold.push(job.progress.close_on_exit)
        return _run_job(job, None if child else hold)


def _run_job(job: RecompressJob, hold: contextlib.ExitStack | None) -> RecompressReport:
    if job.append:  # zopt.job.append: extends DST in place of a new store
        from zopt.job.append import run_append

        return run_append(job, hold)
    t0 = time.perf_counter()
    src, target, notes = parse_job(job, hold)
    prepared = plan_of_work(job, src, target, notes)
    if job.dry_run:  # the graph is built as the run would build it (its cost is part of the plan), never run
        return _dry_run(job, prepared, target, notes, t0)
    if job.progress is not None:  # the logical bytes still to write: MB/s and the time left
        job.progress.expect_bytes(sum(r.logical_bytes * (r.units - r.units_resumed) // max(r.units, 1)
                                      for r in prepared.reports.values()))
    try:
        graph_seconds = _write(job, prepared, target, notes)
        if hold is not None and job.progress is not None:
            job.progress.close()  # before the publish: a before_publish check (--verify) shows a bar of its own
        readers = _publish(job, prepared, target)
    finally:
        release_job(prepared.job_id)
    elapsed = time.perf_counter() - t0
    for rep in prepared.reports.values():
        rep.seconds = elapsed
    return RecompressReport(dst=target.text, arrays=list(prepared.reports.values()), seconds=elapsed,
                            source_bytes=src.total_bytes(), graph_seconds=graph_seconds, notes=notes, job=job,
                            skipped=prepared.skipped, readers=readers)


def _dry_run(job: RecompressJob, p: Prepared, target: Target, notes: list[Note],
             t0: float) -> RecompressReport:
    """The plan of work, with every child group's, and the graph built (never run)."""
    try:
        target.tasks(_run(job, p))
    finally:
        release_job(p.job_id)
    reports = dict(p.reports)
    for child in p.children:  # planned where the run writes it: inside the partial store (``_write_children``)
        where = os.path.join(target.root, child)
        finished = _child_finished(p, target.root, child)
        # a child group the interrupted run finished is skipped by the run: planned as new, every unit
        # resumed; a leftover without the job's record is replaced, as the run starts over
        stale = p.record is None and os.path.exists(where)
        sub = run_job(dataclasses.replace(job.for_child(child, where), overwrite=finished or stale), child=True)
        for a in sub.arrays:
            a.name = f"{child}/{a.name}"
            if finished:
                a.units_resumed = a.units
            reports[a.name] = a
        if finished:
            notes.append(Note(_FINISHED_CHILD.format(child=child), "resumed", child))
        notes.extend(n.in_child(child) for n in sub.notes)
    from zopt.planning.readers import array_codecs, reader_line

    return RecompressReport(dst=target.text, arrays=list(reports.values()), seconds=time.perf_counter() - t0,
                            source_bytes=p.src.total_bytes(), notes=notes, job=job, skipped=p.skipped,
                            readers=reader_line(array_codecs(p.planned)).replace("readers:", "readers (planned):", 1))


def _run(job: RecompressJob, p: Prepared) -> WriteRun:
    assert p.work is not None  # plan_of_work made it
    return WriteRun(p.work, p.src, job.decision, p.job_id, p.lossy_vars, p.reports, job.scheduler, job.progress)


def _write(job: RecompressJob, p: Prepared, target: Target, notes: list[Note]) -> float:
    """Create (or resume) the target, run the graph, rewrite the child groups. Returns graph seconds.
    On an error the partial store is kept when the journal can resume it, else removed."""
    made = False
    try:
        target.begin(p.record is None, p.job_id, p.src.text)
        partial = target.root  # an Icechunk target's session exists once begun
        if p.record is None:
            assert p.spec is not None  # plan_of_work made it
            target.create(p.spec, p.fp, p.job_id, p.layouts)  # the metadata, then the journal's record
        else:
            notes.append(Note(f"resumed the interrupted job in {target.kept_text}", "resumed"))
        made = True
        for name in p.names:  # the work was planned on metadata made in memory: the target must be the same
            if not same_metadata(zarr.open_array(partial, path=name, mode="r"), p.planned[name]):
                raise RuntimeError(f"zopt: the target metadata of array {name!r} differs from the planned one")
        graph_seconds = target.write(_run(job, p))
        return graph_seconds + _write_children(job, p, partial, notes)
    except BaseException as exc:
        gone = target.gone(exc) if made else None
        _keep_or_discard(target, exc)
        if gone is not None:
            raise gone from exc
        raise


_FINISHED_CHILD = "{child}: already rewritten by the interrupted run"


def _child_finished(p: Prepared, partial: str, child: str) -> bool:
    """A child group the interrupted run of this job published into its partial store: the run skips it."""
    return p.record is not None and os.path.exists(os.path.join(partial, child, "zarr.json"))


def _write_children(job: RecompressJob, p: Prepared, partial: str, notes: list[Note]) -> float:
    """Each child group is a store of its own inside the new one, written by the same job re-rooted."""
    seconds = 0.0
    for child in p.children:
        if _child_finished(p, partial, child):
            notes.append(Note(_FINISHED_CHILD.format(child=child), "resumed", child))  # published into the partial store
            continue
        sub = run_job(job.for_child(child, os.path.join(partial, child)), child=True)
        for a in sub.arrays:
            a.name = f"{child}/{a.name}"
            p.reports[a.name] = a
        notes.extend(n.in_child(child) for n in sub.notes if n.kind != "skipped")
        seconds += sub.graph_seconds
    return seconds


def _publish(job: RecompressJob, p: Prepared, target: Target) -> str:
    """Consolidate, run ``before_publish`` over every array written, then publish atomically.
    Returns the reader line of the store as published (every array, copied ones included)."""
    from zopt.planning.readers import reader_line, store_arrays

    with _kept_or_discarded(target):
        if not p.root_meta and target.consolidates:
            with warnings.catch_warnings():  # zarr warns that consolidation is not in the v3 spec
                warnings.simplefilter("ignore")
                zarr.consolidate_metadata(target.root, zarr_format=3)
        readers = reader_line(store_arrays(target.written()))
    if job.before_publish is not None:
        try:
            with job_source(p.src):  # a check combining the same files reuses the job's summaries (zopt.io.multi)
                job.before_publish(target.output(), list(p.reports))
        except BaseException as exc:
            exc.add_note(f"before_publish refused the written store; it is kept in {target.kept_text}")  # Icechunk: the work branch
            raise
    with _kept_or_discarded(target):
        target.publish()
    return readers


@contextlib.contextmanager
def _kept_or_discarded(target: Target) -> Iterator[None]:
    """On an error in the block: the partial store kept for a resume or discarded
    (``_keep_or_discard``), and a partial store removed by another process said as such."""
    try:
        yield
    except BaseException as exc:
        gone = target.gone(exc)
        _keep_or_discard(target, exc)
        if gone is not None:
            raise gone from exc
        raise


def _keep_or_discard(target: Target, exc: BaseException) -> None:
    """A resumable failure keeps the partial store (with a note saying so); any other removes it."""
    journal = target.journal
    if journal is not None and keeps_partial(exc) and _resumable(journal):
        exc.add_note(f"the finished shards are kept in {target.kept_text}: "
                     "run the same command again to resume")
    else:
        target.discard()


class _Journal(Protocol):
    def read(self) -> object: ...


def _resumable(journal: _Journal) -> bool:
    """Whether the journal holds a record a re-run resumes; reading it may fail where another job took the
    destination over (an Icechunk work branch): then not this job's to keep."""
    try:
        return journal.read() is not None
    except Exception:
        return False
