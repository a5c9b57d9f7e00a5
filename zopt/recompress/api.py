"""``recompress`` and ``recompress_in_place``: parse → plan of work → check → target → graph → run → report.

A reader following one array from the CLI to the shard file meets, in order: the options parsed
here, the source described (``zopt.sources``), its chain (``chains``), the plan of work built and
checked in memory (``work``: every refusal — a plan for other arrays, ``max_memory``, a
fixed-slot chain without a size bound — is raised before the destination or its partial store
exists), the target created (``targets``), the Dask graph (``dask_graph``) of worker functions
(``tasks``), its run (``zopt.scheduling``), the publish and the report (``reports``).

Size: recompress's docstring documents every option, which makes this module long-ish.
"""

from __future__ import annotations

import math
import os
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import zarr

from zopt import locations as loc
from zopt.chunking import parse_shape, unused_shape_notes
from zopt.codecs.conditional import conditional_codecs_in
from zopt.journal import InPlaceJournal, Journal, fingerprint, keeps_partial
from zopt.lock import store_lock
from zopt.paths import (
    check_no_overlap,
    check_replaceable,
    check_store_replaceable,
    recover,
    resolve,
    store_text,
)
from zopt.recompress.chains import (
    chains_to_check,
    menu_chains,
    parse_chain,
    split_chain,
    split_for,
    with_checksum,
)
from zopt.recompress.dask_graph import in_place_tasks, run_writes, write_tasks
from zopt.recompress.reports import ArrayReport, RecompressReport
from zopt.recompress.targets import (
    LocalTarget,
    StoreTarget,
    check_no_url_overlap,
    chunk_bytes_stored,
    create_target,
    destination,
    same_metadata,
    stored_bytes_of,
    stored_sizes,
    target_arrays,
)
from zopt.recompress.work import LAYOUTS, ArrayWork, build_work, layouts_for, plan_for
from zopt.rewrite import GRACE_SECONDS, has_inner_checksum, shrink_after_grace, unchecked_note
from zopt.shards import layout_of
from zopt.sources import (
    SourceVariable,
    children_to_copy,
    root_array_metadata,
    root_array_variable,
    source_variables,
    zarr_v3_group,
)
from zopt.sources import release as release_sources

__all__ = ["parse_max_memory", "recompress", "recompress_in_place"]


def recompress(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    codecs: Sequence[dict[str, Any]] | str | None = None,
    chunks: tuple[int, ...] | str | None = None,
    shards: tuple[int, ...] | str | None = None,
    decision: Any = "compress_if_smaller",
    variables: Sequence[str] | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    progress: Callable[[Any], Any] | None = None,
    layout: str = "compact",
    slot_parts: int | None = None,
    plan: Any = None,
    max_memory: int | str | None = None,
    dry_run: bool = False,
    lossy: Any = None,
    readers: Sequence[str] | str | None = None,
    checksum: bool | None = None,
    before_publish: Callable[[Any, list[str]], None] | None = None,
    menu: Any = None,
    budget: Any = None,
) -> RecompressReport:
    """Rewrite ``src`` into a new Zarr v3 store ``dst`` with the target codec chain.

    Parameters
    ----------
    src : a Zarr v2/v3 store (a group, whose child groups are rewritten too, each like a store of
        its own; or a root array, giving a root array) or a netCDF/HDF5 file (without groups): a
        local path (resolved here, not on Dask workers) or an fsspec URL (``s3://…``, ``gs://…``,
        ``memory://…``, ``file://…``; see ``zopt.locations``). Only read.
    dst : the new Zarr v3 store: a local directory path (written under ``dst.zopt-partial`` and
        renamed into place at the end), or a ``zarr.abc.store.Store`` / fsspec URL such as
        ``s3://bucket/x.zarr`` or ``memory://x.zarr``. A store has no positional writes and no
        rename: it is written in place (cleared first, and again on failure), and a
        ``fixed-slot`` layout falls back to packed shards assembled inside one task each, which
        ``RecompressReport.notes`` says. A ``MemoryStore`` is shared by threads only: use the
        threaded or synchronous scheduler with it.
    codecs : target codec chain (list of codec JSON objects or a JSON string); inside
        ``sharding_indexed`` when sharded. Default: ``zopt.menu.default_chain`` of each
        variable's data type (``DEFAULT_CHAIN`` for types of 2 bytes and more).
    chunks, shards : inner chunk and shard shapes: by dimension name (``"y=32,x=32"`` or a dict;
        unnamed dimensions whole, for every variable having one of the names) or positional
        (``"1,32,32"``, for every variable with that many dimensions). Defaults: ~256 KiB inner
        chunks, ~64 MiB shards; shards are rounded down to a multiple of the inner chunks.
    decision : how ``conditional`` codecs pick masks (see ``zopt.decisions``).
    variables : names to rewrite (default every numeric variable of one dimension or more), a
        child group's as ``"group/name"``; the others are still copied unchanged.
    scheduler : None for Dask's local threaded scheduler, ``"processes"``/``"synchronous"``, or a
        ``dask.distributed`` scheduler address (``tcp://host:8786``).
    overwrite : replace an existing ``dst`` that is a Zarr store: it is renamed to
        ``dst.zopt-replaced``, the new store renamed into place, then the old one deleted
        (``zopt.paths.publish``; a job killed in between is finished by the next one on ``dst``).
    progress : a context-manager factory wrapping the compute (e.g. a progress bar), called
        with the number of shards (chunks when unsharded).
    layout : shard layout, ``"compact"`` (each shard encoded and written packed by one task)
        or ``"fixed-slot"`` (inner chunks of a shard written into fixed slots by
        ``slot_parts`` concurrent tasks, then indexed and renamed by a finalize task; see
        ``zopt.shards``). Unsharded arrays ignore it.
    slot_parts : tasks per shard in the fixed-slot layout (default: ~``SLOT_TASK_BYTES`` of
        raw data each, at least 2).
    plan : a ``zopt.plan.Plan`` (or a path to one) deciding the masks instead of ``decision``:
        no trial encoding at write time. Checked before anything is written against each
        rewritten array (grid, codec list, header_bits, shape, dtype; PlanMismatchError before the
        destination or its partial store exists), and chunk by chunk
        against the content it was made for while writing (the partial store is then removed).
    max_memory : refuse the job (ValueError, before the destination or its partial store exists) when a task's projected
        peak memory exceeds this many bytes (an int, or a string such as ``"2GiB"``).
    lossy : per-variable lossy recompression (``zopt.lossy``): ``["tos=abs:0.01", …]`` or
        ``{"tos": "abs:0.01"}`` (also ``keepbits:K``, ``info:L``, ``info:L:chunk``,
        ``plan:PATH``). Analysed and validated before anything is written; each such variable gets
        its own chain and a ``zopt_lossy`` attribute, and every chunk is checked as written.
    readers : refuse (ValueError, before anything is written) a target chain that one of these
        readers cannot read: ``zopt``, ``zarr-python``, ``tensorstore``, ``zarrs``
        (``zopt.readers``). Without ``codecs`` it narrows the menu instead (``zopt.candidates``).
    menu, budget : without ``codecs`` or ``plan``, each variable's chain is chosen from the codec
        menu (``zopt.candidates``: a menu name or candidate names; default ``"default"``) by trial
        encodings of a few of its chunks within the speed ``budget`` (``zopt.optimizer``: a number
        > 0, default 1, or ``"inf"`` for size first); the report's notes name each choice. Ignored
        chains are never silent: ``menu``/``budget`` with ``codecs`` or a ``plan`` is a ValueError.

    checksum : end the inner chain of sharded arrays with ``crc32c`` (4 bytes a chunk), so a
        reader that pairs an old shard index with a rewritten file (``zopt compact``,
        ``--in-place``) gets an error instead of wrong values; default: for ``fixed-slot``
        (the layout written to be rewritten), not for ``compact``. See docs/reliability.md.
    dry_run : build the plan of work (``zopt.recompress.work``: target metadata in memory) and
        return it without writing anything: the report's arrays give shapes, units (shards), tasks,
        logical and source bytes, projected memory per task, and units an interrupted run of
        the same job already finished (``units_resumed``); ``stored_after`` stays 0.

    before_publish : called as ``before_publish(partial, names)`` once every write has finished
        and before the publish, with the partial store (a local path, or the zarr Store of a
        store destination) and the names of the arrays written (a child group's as
        ``"group/name"``). If it raises, the partial store is kept as it is (resumable) and the
        exception propagates: e.g. a check of the written values (``zopt verify``).

    Resuming (local directory destinations): the job keeps a journal in ``dst.zopt-partial``
    (``zopt.journal``). A run killed, preempted or failed for a reason outside the job's inputs
    (a lost worker, an I/O error, Ctrl-C) leaves it; the same call again skips the shards
    already written and publishes as usual. Other options or a changed source raise
    ``zopt.journal.ResumeMismatchError`` before anything is touched.

    Returns a ``RecompressReport``. Raises OverlapError (before anything is written) if ``src``
    and ``dst`` overlap; FileExistsError if ``dst`` exists and not ``overwrite``;
    NotAZarrStoreError if it exists and is not a Zarr store; ValueError for a bad codec chain, shape or layout (also for ``fixed-slot``
    with an inner chain whose encoded size has no known bound, naming the codec, before the destination exists). On any error the partial store is
    removed and ``dst`` is left as it was.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout: {layout!r} is not one of {list(LAYOUTS)}")
    if plan is not None and not (isinstance(decision, str) and decision == "compress_if_smaller"):
        raise ValueError("decision: a plan decides every chunk's mask; give a plan or a decision, not both")
    src = os.fspath(src) if loc.is_url(src) else resolve(loc.local_path(src))  # on the client: workers may run elsewhere
    store, path = destination(dst)
    notes: list[str] = []
    target: LocalTarget | StoreTarget
    if store is None:
        dst = resolve(path)
        if not loc.is_url(src):
            check_no_overlap(src, dst)
        recovered = recover(dst)
        if recovered:
            notes.append(recovered)
        check_replaceable(dst, overwrite)
        target = LocalTarget(dst)
    else:
        check_no_url_overlap(src, store)
        check_store_replaceable(store, overwrite, store_text(store))
        if layout == "fixed-slot":
            layout = "compact"
            notes.append(f"layout: fixed slots need positional writes (a local directory store); {store_text(store)} "
                         "has none, so each shard was assembled packed inside one task and written with one put")
        target = StoreTarget(store)
    chain = parse_chain(codecs)
    split = split_chain(chain)
    if (menu is not None or budget is not None) and (codecs is not None or plan is not None):
        raise ValueError("menu, budget: they choose a chain per variable when none is given; give them or codecs/plan, not both")
    if checksum not in (None, True, False):
        raise ValueError(f"checksum: {checksum!r} is not one of [None, True, False]")
    want_checksum = layout == "fixed-slot" if checksum is None else checksum
    if isinstance(plan, str | os.PathLike):
        from zopt.plan import Plan

        plan = Plan.load(plan)
    limit = parse_max_memory(max_memory)
    chunk_arg = parse_shape(chunks, "chunks")
    shard_arg = parse_shape(shards, "shards")

    t0 = time.perf_counter()
    children = children_to_copy(src, store, plan)
    source_group = zarr_v3_group(src)  # opened once: variables, target metadata
    root_meta = root_array_metadata(src)
    job_id = uuid.uuid4().hex[:12]  # names temp files and tasks; the token of the sources this job opens
    journal, record = target.journal, None
    try:  # the plan of work, checked: nothing written yet, the sources opened so far closed on a refusal
        source = root_array_variable(src, root_meta) if root_meta else source_variables(src, source_group, job_id)
        names = _names_to_rewrite(source, variables, children)
        notes.extend(unused_shape_notes(source, names, {"chunks": chunk_arg, "shards": shard_arg}))
        if root_meta and not names:
            notes.append("the source is a root array that is not numeric; copied as it is")
        lossy_vars: dict[str, Any] = {}
        if lossy:  # zopt.lossy: analysed here; own chain, attributes and a per-chunk step per variable
            from zopt.lossy.prepare import prepare_for_recompress

            lossy_vars = prepare_for_recompress(src, source, names, lossy, chunk_arg, shard_arg, scheduler, variables)
        if readers:
            from zopt.readers import check_readers

            check_readers(chains_to_check(names, chain, lossy_vars, codecs, plan), readers)
        if journal is not None:
            fp = fingerprint(src, names, {"codecs": chain, "chunks": chunks, "shards": shards, "decision": decision,
                                          "variables": variables, "layout": layout, "slot_parts": slot_parts,
                                          "plan": plan, "lossy": lossy, "readers": readers, "checksum": want_checksum,
                                          "menu": menu, "budget": budget})
            record = journal.read()
            if record is not None:
                journal.check(record, fp, dst)  # ResumeMismatchError: nothing touched
        if record is not None:
            layouts = Journal.layouts(record)
        else:
            layouts = layouts_for(source, names, chunk_arg, shard_arg, plan if chunks is None else None, variables)
        chosen = menu_chains(src, source, names, layouts, lossy_vars, codecs, plan, menu, budget, readers, decision,
                              layout, scheduler, job_id, partial=target.root if record is not None else None)
        if any(c.trials for c in chosen.values()):
            notes.append("chains chosen from the menu (zopt.candidates): " + ", ".join(f"{n}={chosen[n].name}" for n in names if n in chosen))
        splits = {n: split_chain(chosen[n].chain) if n in chosen else split_for(source[n], codecs, split) for n in names}
        splits.update({n: split_chain(lv.chain(chain)) for n, lv in lossy_vars.items()})  # zopt.lossy
        if want_checksum:  # sharded arrays: crc32c at the end of the inner chain
            splits = {n: with_checksum(sp) if layouts[n][1] is not None else sp for n, sp in splits.items()}
        create = {"root_meta": root_meta, "token": job_id, "attrs": {n: lv.attributes() for n, lv in lossy_vars.items()},
                  "fills": {n: lv.fill_value for n, lv in lossy_vars.items()}}
        planned = target_arrays(src, source_group, source, names, layouts, splits, **create)
        work = build_work(names, source, layouts, planned, layout=layout, slot_parts_=slot_parts, plan=plan,
                          done=journal.done if record is not None else None)
        over = work.over_memory(limit)
        if over is not None:
            raise ValueError(_memory_message(over, limit))
        reports = {name: _report(w, source[name], stored_bytes_of(src, name)) for name, w in work.arrays.items()}
    except BaseException:
        release_sources(job_id)
        raise
    if dry_run:  # the graph is built as the run would build it (its cost is part of the plan), never run
        write_tasks(work, target, src, decision, job_id, lossy_vars)
        release_sources(job_id)
        if children:
            notes.append(f"the child groups {children} are rewritten as stores of their own, not planned here: "
                         "give SRC/GROUP to --dry-run for each")
        return RecompressReport(dst=target.text, arrays=list(reports.values()), seconds=time.perf_counter() - t0,
                                source_bytes=loc.total_bytes(src), notes=notes)

    partial = target.root
    hook_running = False
    try:
        target.start(fresh=record is None)
        if record is None:
            create_target(src, source_group, partial, source, names, layouts, splits, **create)
            if journal is not None:
                journal.begin(fp, job_id, layouts)
        else:
            notes.append(f"resumed the interrupted job in {partial}")
        for name in names:  # the work was planned on metadata made in memory: the target must be the same
            if not same_metadata(zarr.open_array(partial, path=name, mode="r"), planned[name]):
                raise RuntimeError(f"zopt: the target metadata of array {name!r} differs from the planned one")
        tasks = write_tasks(work, target, src, decision, job_id, lossy_vars)
        graph_seconds = run_writes(tasks, reports, target.stored_sizes, scheduler, progress, token=job_id)
        target.after_writes()
        for child in children:  # each child group is a store of its own inside the new one
            if record is not None and os.path.exists(os.path.join(partial, child, "zarr.json")):
                notes.append(f"{child}: already rewritten by the interrupted run")  # published into the partial store
                continue
            sub = recompress(
                os.path.join(src, child), os.path.join(partial, child), codecs=codecs, chunks=chunks, shards=shards,
                decision=decision, scheduler=scheduler, progress=progress, layout=layout, slot_parts=slot_parts,
                max_memory=max_memory, checksum=checksum, menu=menu, budget=budget, readers=readers,
                variables=None if variables is None else [v.split("/", 1)[1] for v in variables if v.startswith(child + "/")],
            )
            for a in sub.arrays:
                a.name = f"{child}/{a.name}"
                reports[a.name] = a
            notes.extend(f"{child}: {n}" for n in sub.notes)
            graph_seconds += sub.graph_seconds
        if not root_meta:
            with warnings.catch_warnings():  # zarr warns that consolidation is not in the v3 spec
                warnings.simplefilter("ignore")
                zarr.consolidate_metadata(partial, zarr_format=3)
        if before_publish is not None:
            hook_running = True
            before_publish(partial, list(reports))
            hook_running = False
        target.publish()
    except BaseException as exc:
        if hook_running:
            exc.add_note(f"before_publish refused the written store; it is kept in {target.text if store is not None else partial}")
        elif journal is not None and keeps_partial(exc) and journal.read() is not None:
            exc.add_note(f"the finished shards are kept in {partial}: run the same command again to resume")
        else:
            target.discard()
        raise
    finally:
        release_sources(job_id)
    elapsed = time.perf_counter() - t0
    for rep in reports.values():
        rep.seconds = elapsed
    return RecompressReport(
        dst=target.text, arrays=list(reports.values()), seconds=elapsed,
        source_bytes=loc.total_bytes(src), graph_seconds=graph_seconds, notes=notes,
    )


def _report(w: ArrayWork, var: SourceVariable, stored_before: int | None) -> ArrayReport:
    """The report of one array before its run: its plan of work, and what an interrupted run did."""
    rep = ArrayReport(
        name=w.name, shape=tuple(var.shape), dtype=str(var.dtype),
        chunks=math.prod(math.ceil(s / c) for s, c in zip(var.shape, w.inner, strict=True)),
        chunks_written=w.resumed_chunks, logical_bytes=int(var.size * var.dtype.itemsize), stored_before=stored_before,
        layout=w.layout, projected_task_bytes=w.projected_task_bytes, units=w.units, units_resumed=w.units_resumed,
        tasks=w.tasks,
    )
    rep.masks.update(w.resumed_masks)
    return rep


def parse_max_memory(value: int | str | None) -> int | None:
    """``max_memory`` in bytes (an int, or a string such as ``"2GiB"``), or None. ValueError naming it."""
    if value is None:
        return None
    from dask.utils import parse_bytes

    try:
        n = parse_bytes(value) if isinstance(value, str) else int(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"max_memory: {value!r} is not a size such as 2GiB or 500MB") from exc
    if n <= 0:
        raise ValueError(f"max_memory: {value!r} must be positive")
    return n


def _memory_message(w: ArrayWork, limit: int) -> str:
    from dask.utils import format_bytes

    return (
        f"max_memory: a write task of array {w.name!r} needs ~{format_bytes(w.projected_task_bytes)} (projected: input "
        f"region twice, encoded output, buffers), more than the limit of {format_bytes(limit)}; use smaller --shards, "
        "or --layout fixed-slot with more --slot-parts, or raise --max-memory"
    )


def recompress_in_place(
    store: str | os.PathLike,
    variables: Sequence[str] | None = None,
    *,
    decision: Any = "compress_if_smaller",
    plan: Any = None,
    scheduler: str | None = None,
    progress: Callable[[Any], Any] | None = None,
    grace: float = GRACE_SECONDS,
) -> RecompressReport:
    """Re-decide the ``conditional`` masks of a store's arrays in place, shard by shard.

    The "write fast, compress later" step: a store written quickly (e.g. ``conditional`` with
    mask 0 everywhere, in fixed slots) is rewritten with per-chunk masks from ``decision`` or a
    ``plan`` (``zopt.plan.Plan`` or a path to one), without changing any metadata: the codec
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
        (``zopt.rewrite``; a reader holding a shard index longer may read past a new end).

    The job holds the store's lock (``zopt.lock``); a shard is replaced as ``zopt.rewrite``
    describes, so a reader pairing an old index with a new file gets an error, not wrong values,
    when the inner chain ends with ``crc32c`` (``RecompressReport.notes`` names arrays without).
    Resumable: each finished shard (chunk file) gets a marker in ``STORE/.zopt-in-place``
    (``zopt.journal.InPlaceJournal``); the same call after an interruption skips the units whose
    marker matches the job and the file (counted in ``ArrayReport.units_resumed``) and rewrites
    the rest; the journal is removed when a run completes.
    Returns a ``RecompressReport`` (``dst`` is ``store``). Raises ValueError when ``store`` is
    not a local Zarr v3 group, or a named array is missing or has no ``conditional`` codec
    (its chunks cannot change without changing its metadata: use ``recompress``), or no array
    has one; ``PlanMismatchError`` for a plan made for other arrays or contents;
    StoreLockedError when another job is rewriting the store.
    """
    if not grace >= 0:
        raise ValueError(f"grace: {grace!r} must be a number of seconds >= 0")
    store = resolve(store)  # on the client: Dask workers may run in another directory
    group = zarr_v3_group(store)
    if group is None:
        raise ValueError(f"store: {store!r} is not a Zarr v3 group in a local directory (in-place rewrites replace files)")
    arrays = dict(group.arrays())
    if isinstance(plan, str | os.PathLike):
        from zopt.plan import Plan

        plan = Plan.load(plan)
    if variables:
        missing = [n for n in variables if n not in arrays]
        if missing:
            raise ValueError(f"variables: {missing} not in the store; it has {sorted(arrays)}")
        names = list(variables)
    else:
        names = [n for n, a in arrays.items() if conditional_codecs_in(a.metadata.codecs)]
        if not names:
            raise ValueError(f"store: no array of {store!r} has a conditional codec, so in place there is nothing to "
                             "re-decide; rewrite it into a new store with recompress SRC DST")
    layouts, plans = {}, {}
    for name in names:  # checked before the store is locked or any file touched
        array = arrays[name]
        if not conditional_codecs_in(array.metadata.codecs):
            raise ValueError(f"variables: array {name!r} has no conditional codec, so its chunks cannot change without "
                             "changing its metadata; rewrite it into a new store with recompress SRC DST")
        layouts[name] = layout_of(array)
        inner = layouts[name].inner_shape if layouts[name] is not None else tuple(array.chunks)
        plans[name] = plan_for(plan, name, array, inner) if plan is not None else None
    t0 = time.perf_counter()
    source_bytes = loc.total_bytes(store)
    tasks, reports, notes = [], {}, []
    job_id = uuid.uuid4().hex[:12]
    with store_lock(store, job_id) as tmp_dir:
        resume = InPlaceJournal.start(store, names, decision, plan)  # what an interrupted run of this job finished
        shards = []  # (path, layout, key) of every shard rewritten
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
            array_tasks, array_shards = in_place_tasks(store, name, array, shard_layout, decision, plans[name], job_id,
                                                       str(tmp_dir), resume, reports[name])
            tasks += array_tasks
            shards += array_shards
        graph_seconds = run_writes(tasks, reports, lambda n: stored_sizes(store, n), scheduler, progress, token=job_id)
        if shrink_after_grace(shards, str(tmp_dir), grace, scheduler):
            for name, rep in reports.items():
                rep.stored_after, rep.allocated_after = stored_sizes(store, name)
        resume.remove()  # complete: the next run is a new job
    elapsed = time.perf_counter() - t0
    for rep in reports.values():
        rep.seconds = elapsed
    return RecompressReport(dst=store, arrays=list(reports.values()), seconds=elapsed, source_bytes=source_bytes,
                            graph_seconds=graph_seconds, notes=notes)


def _names_to_rewrite(source: dict[str, SourceVariable], variables: Sequence[str] | None,
                      children: list[str]) -> list[str]:
    """The root group's variables to rewrite: ``variables`` without the ``child/…`` paths (which
    the child groups' jobs take), or every numeric variable of one dimension or more. ValueError
    naming a variable or child group the source lacks."""
    if variables is None:
        return [n for n, v in source.items() if v.ndim >= 1 and v.dtype.kind in "biufc"]
    names = [v for v in variables if "/" not in v]
    missing = [n for n in names if n not in source]
    missing += [v for v in variables if "/" in v and v.split("/", 1)[0] not in children]
    if missing:
        where = f"; it has {sorted(source)}" + (f" and child groups {children}" if children else "")
        raise ValueError(f"variables: {missing} not in the source{where}")
    return names


