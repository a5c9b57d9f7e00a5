"""``recompress(..., append=True)``: new files appended along the concat dimension to a store zopt wrote.

The phases, under the destination's lock (``DST.zopt-lock``, as any job writing DST takes it: a
second append, or a recompress of DST, is refused with ``StoreLockedError`` while one runs):

1. an install an earlier run began and did not finish (killed) is finished
   (``zopt.store.staged.install``): its files are whole, so it needs nothing but the staging directory;
2. the new files are combined and checked among themselves (``zopt.io.multi``), then against DST
   (``zopt.io.append_check``): the same arrays, data types, fill values, attributes (CF packing
   included), dimensions and sizes off the concat dimension, the same values without it, and a
   concat coordinate strictly after DST's last value; each refusal names the files, nothing is written;
3. each array along the concat dimension keeps DST's codec chain, inner chunks and shards, read from
   its ``zarr.json`` (no trial encodings): the units (shards; chunks of an unsharded array) from the
   last, partly filled one on are written whole, by the job's usual tasks (``zopt.job.dask_graph``),
   into ``DST.zopt-append`` with their metadata documents at the new shape; the old rows of the
   partly filled unit are read back from DST (``AppendedSource``). The staging directory holds a
   journal (``zopt.store.journal``): a killed run is resumed by the same command, which writes only
   the units not marked done, and refused (``ResumeMismatchError``) for other files or options;
4. the install: new units first (beyond DST's old shape, invisible to its readers), then the
   rewritten partial units replaced atomically, each array's ``zarr.json``, the root's last.

DST stays as it was until the install begins; a run killed during it leaves DST readable as the old
or the new store, and the next run (the same command, or another append) finishes it.

Only a local directory DST is appended to: a zarr Store, an fsspec URL or an Icechunk branch is
refused (``OptionError`` naming ``append``). Options that would choose another layout or chain
(``chunks``/``shards`` other than DST's, ``codecs``, ``preset``, ``menu``, ``plan``, …) are refused
naming the option.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import time
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np

from zopt.compat.job_cache import release_job
from zopt.errors import OptionError
from zopt.io import locations as loc
from zopt.io.append_check import (
    AppendedSource,
    StoreDescription,
    check_after,
    check_against_store,
    check_constants,
    describe_store,
)
from zopt.io.multi import MultiSource, along_concat_dim
from zopt.io.paths import check_no_overlap, recover, resolve
from zopt.io.source_kinds import open_source
from zopt.job.dask_graph import run_writes, write_tasks
from zopt.job.opening import WriteRun
from zopt.job.reports import ArrayReport, RecompressReport
from zopt.job.targets import TargetSpec, stored_sizes, target_arrays
from zopt.job.work import WorkOptions, build_work
from zopt.notes import Note
from zopt.planning.chunking import is_coordinate, variable_layout
from zopt.store.journal import Journal, fingerprint, remove_temporaries
from zopt.store.lock import destination_lock
from zopt.store.staged import STAGING_SUFFIX, install, installing, stage_document

if TYPE_CHECKING:
    from zopt.job.options import RecompressJob

__all__ = ["APPEND_OPTIONS", "run_append"]

#: the options an append takes besides SRC and DST; ``chunks``/``shards`` only where they are DST's
APPEND_OPTIONS = ("append", "concat_dim", "combine", "scheduler", "progress", "max_memory", "chunks", "shards")


def _refuse_options(job: RecompressJob) -> None:
    """OptionError naming the first option an append does not honour (it keeps DST's chains and layout)."""
    if job.concat_dim is None:
        raise OptionError("append", "appends files along a dimension: give concat_dim (--concat-dim)")
    for name, _ in job.asked:
        if name not in APPEND_OPTIONS:
            raise OptionError(name, "--append keeps dst's codec chains, inner chunks and shards (one layout) and "
                              "writes nothing else: drop it (append chooses no new chain, layout or destination)")
    if job.before_publish is not None:
        raise OptionError("before_publish", "--append installs its files into dst as it goes: check the result "
                          "afterwards with zopt verify against the old and new files together")
    from zarr.abc.store import Store

    if isinstance(job.dst, Store) or loc.is_url(job.dst) and not str(job.dst).startswith("file://"):
        raise OptionError("append", f"dst {job.dst if isinstance(job.dst, str) else type(job.dst).__name__} is not "
                          "a local directory: --append extends a local Zarr store (not a zarr Store, an fsspec URL "
                          "or an Icechunk branch yet)")


def _check_layout_options(job: RecompressJob, store: StoreDescription, source: dict[str, Any], names: list[str]) -> None:
    """``chunks``/``shards`` given: each array's, as a fresh job on DST's shape would choose them,
    must be DST's (OptionError naming the option and the array otherwise)."""
    for option, spec, part in (("chunks", job.chunks, 0), ("shards", job.shards, 1)):
        if spec is None:
            continue
        for name in names:
            old, var = store.arrays[name], source[name]
            if is_coordinate(name, var):
                continue  # a 1-D coordinate is one chunk of its length: DST's is kept
            from zopt.io.sources import SourceVariable

            at_old = SourceVariable(old.shape, var.dtype, var.dims)
            chosen = variable_layout(name, at_old, job.chunks, job.shards, None, job.variables)[part]
            if tuple(chosen or ()) != tuple(old.layout[part] or ()):
                raise OptionError(option, f"gives {name!r} {'inner chunks' if part == 0 else 'shards'} {chosen}, "
                                  f"dst {store.path!r} has {old.layout[part]}: --append keeps dst's layout; drop "
                                  f"--{option} or give dst's")


class _Staging:
    """The ``WriteTarget`` of an append's tasks (``zopt.job.dask_graph.write_tasks``): the staging directory."""

    store = None

    def __init__(self, root: str) -> None:
        self.root = root
        self.journal = Journal(root)

    def shard_dir(self, name: str) -> str:
        return os.path.join(self.root, name)


def _new_metadata(src: MultiSource, source: dict[str, Any], names: list[str], store: StoreDescription,
                  job_id: str) -> dict[str, dict[str, Any]]:
    """``{name: zarr.json}`` of the arrays a fresh job on the new files would write, with DST's
    layouts (the codecs left aside: DST's are kept)."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from zopt.planning.chains import split_chain

    layouts = {n: store.arrays[n].layout if n in store.arrays else ((1,) * source[n].ndim, None) for n in names}
    floats = {n for n in src.repacks if n in names}  # files packed differently: their floats, NaN fill
    spec = TargetSpec(src, None, source, names, layouts, {n: split_chain([{"name": "bytes"}]) for n in names},
                      job_id=job_id, fills={n: np.nan for n in floats})
    arrays = target_arrays(spec)
    out = {}
    for name, arr in arrays.items():
        raw = sync(arr.store_path.store.get(f"{name}/zarr.json", prototype=default_buffer_prototype()))
        assert raw is not None  # target_arrays wrote it
        out[name] = json.loads(raw.to_bytes())
    return out


def _fingerprint(job: RecompressJob, src: MultiSource, store: StoreDescription | None) -> dict[str, Any]:
    """The append's fingerprint: the new files' identities, DST's metadata documents as found (None
    for the install of an earlier run, which changes them), the options that change the output."""
    ident = src.identify([])
    docs = None if store is None else json.dumps({"root": store.root, **{n: a.meta for n, a in store.arrays.items()}},
                                                 sort_keys=True)
    import hashlib

    options = {"mode": "append", "concat_dim": job.concat_dim, "combine": job.combine,
               "dst": None if docs is None else hashlib.blake2b(docs.encode(), digest_size=16).hexdigest()}
    return fingerprint(ident.text, [], options, identity=ident.digest, files=ident.files)


def _same_files(record: dict[str, Any] | None, fp: dict[str, Any]) -> bool:
    return record is not None and record["fingerprint"].get("source identity") == fp["source identity"]


def run_append(job: RecompressJob, hold: contextlib.ExitStack | None) -> RecompressReport:
    """Append ``job.src`` (several files) to the local store ``job.dst`` (see the module docstring).
    Errors as ``zopt.recompress``, and ``OptionError`` naming the files for a check that fails."""
    t0 = time.perf_counter()
    _refuse_options(job)
    dst = resolve(loc.local_path(str(job.dst)))
    notes: list[Note] = []
    if hold is not None:
        hold.enter_context(destination_lock(dst, "append"))
    recovered = recover(dst)
    if recovered:
        notes.append(Note(recovered, "recovered"))
    staging = dst.rstrip("/") + STAGING_SUFFIX
    finished = _finish_install(staging, dst, notes)
    src = open_source(job.src, concat_dim=job.concat_dim, combine=job.combine, scheduler=job.scheduler)
    assert isinstance(src, MultiSource)  # concat_dim: several files
    for one in src.files:
        if not loc.is_url(one):
            check_no_overlap(one, dst)
    notes.extend([Note(f"src: {src.text}", "source"), *src.notes])
    if finished is not None and _same_files(finished, _fingerprint(job, src, None)):
        notes.append(Note(f"finished the install of the interrupted append of {src.text} into {dst}", "resumed"))
        return RecompressReport(dst=dst, arrays=[], seconds=time.perf_counter() - t0, source_bytes=src.total_bytes(),
                                notes=notes, job=job)
    if not os.path.isdir(dst):
        raise OptionError("dst", f"{dst!r} does not exist: --append extends a store; leave --append out to create it")
    store = describe_store(dst)
    job_id = uuid.uuid4().hex[:12]
    try:
        return _append(job, src, store, staging, job_id, notes, t0)
    finally:
        release_job(job_id)


def _finish_install(staging: str, dst: str, notes: list[Note]) -> dict[str, Any] | None:
    """An install an earlier run began: finished (its record returned), else None."""
    if not installing(staging):
        return None
    journal = Journal(staging)
    record = journal.read()
    arrays = list(record.get("arrays", {})) if record is not None else []
    moves = install(staging, dst, arrays, _rewrites(record.get("arrays", {}) if record is not None else {}))
    notes.append(Note(f"finished installing an interrupted append into {dst} ({moves} chunk files moved)", "recovered"))
    return record


def _rewrites(units: dict[str, list[int]]) -> Any:
    """``rewrites(name, key)`` for ``install``: chunk key ``key`` of ``name`` is its partial unit."""
    def rewrites(name: str, key: str) -> bool:
        axis, partial = units[name]
        if partial < 0:
            return False
        parts = key.replace("/", ".").split(".")
        coords = [int(p) for p in parts[1:]] if parts[0] == "c" else [int(p) for p in parts]
        return coords[axis] == partial

    return rewrites


def _append(job: RecompressJob, src: MultiSource, store: StoreDescription, staging: str, job_id: str,
            notes: list[Note], t0: float) -> RecompressReport:
    dim = src.dim
    source = src.variables(job_id)
    names = [n for n, v in source.items() if v.ndim >= 1 and v.dtype.kind in "biufc"]
    names = along_concat_dim(src, source, names, [])
    new = _new_metadata(src, source, [n for n in names if n in store.arrays], store, job_id)
    new |= {n: {} for n in names if n not in store.arrays}  # refused as only in the new files
    # the other variables (0-d, not numeric) are copied as they are: their values are compared below
    new |= {n: store.arrays[n].meta for n in source if n not in new and n in store.arrays}
    check_against_store(store, new, dim, src.files)
    along = [n for n in names if dim in source[n].dims]
    rest = [n for n in store.arrays if n not in along]
    from zopt.compat.zarr_compat import open_array

    check_constants(store, {n: src.schema[n]["values"] for n in rest if "values" in src.schema.get(n, {})},
                    lambda n: open_array(store.path, path=n, mode="r")[...], src.files)
    lengths = {store.arrays[n].shape[store.arrays[n].dims.index(dim)] for n in along}
    if len(lengths) != 1:
        raise OptionError("dst", f"{store.path!r}: its arrays along {dim!r} have different lengths {sorted(lengths)}")
    old = lengths.pop()
    if src.coord is not None and dim in store.arrays and src.combine == "by_coords":
        tail = np.asarray(open_array(store.path, path=dim, mode="r")[max(0, old - 64):old])
        notes.extend(check_after(tail, np.asarray(src.coord), list(src.starts), list(src.files), dim, store.path))
    _check_layout_options(job, store, source, along)
    appended = AppendedSource(store.path, old, src)
    full = appended.variables(job_id)
    units = {}
    for n in along:
        a = store.arrays[n]
        axis = a.dims.index(dim)
        step = a.grid[axis]
        units[n] = [axis, old // step if old % step else -1]
    fp = _fingerprint(job, src, store)
    journal = Journal(staging)
    record = journal.read()
    if record is not None:
        journal.check(record, fp, store.path)  # ResumeMismatchError: other files, or dst changed since
        remove_temporaries(staging)
        notes.append(Note(f"resumed the interrupted append in {staging}", "resumed"))
    else:
        shutil.rmtree(staging, ignore_errors=True)  # a run killed before its record: nothing of it is kept
        for n in along:
            stage_document(staging, f"{n}/zarr.json", store.arrays[n].with_length(units[n][0], full[n].shape[units[n][0]]))
        layouts = {n: store.arrays[n].layout for n in along}
        journal.begin({**fp}, job_id, layouts)
        _record_units(journal, units)
    return _write_and_install(job, appended, store, staging, job_id, along, units, old, notes, t0)


def _record_units(journal: Journal, units: dict[str, list[int]]) -> None:
    """The partial unit of each array, kept in the journal's record for the install."""
    record = journal.read()
    assert record is not None
    record["arrays"] = units
    from zopt.store.files import atomic_write

    atomic_write(journal.dir / "job.json", json.dumps(record, indent=1).encode(), fsync=True)


def _write_and_install(job: RecompressJob, src: AppendedSource, store: StoreDescription, staging: str, job_id: str,
                       along: list[str], units: dict[str, list[int]], old: int, notes: list[Note],
                       t0: float) -> RecompressReport:
    from zopt.compat.zarr_compat import open_array

    full = src.variables(job_id)
    journal = Journal(staging)
    planned = {n: open_array(staging, path=n, mode="r") for n in along}
    layouts = {n: store.arrays[n].layout for n in along}

    def done(name: str) -> dict[str, Any]:
        """Units of DST's old shape (kept as they are) and units an interrupted run finished."""
        import collections

        axis, partial = units[name]
        first = partial if partial >= 0 else math.ceil(old / store.arrays[name].grid[axis])
        grid = [math.ceil(s / k) for s, k in zip(full[name].shape, store.arrays[name].grid, strict=True)]
        kept: dict[str, Any] = {Journal.key(c): (collections.Counter(), 0) for c in np.ndindex(*grid) if c[axis] < first}
        return {**kept, **journal.done(name)}

    work = build_work(along, full, layouts, planned, WorkOptions("compact"), done=done)
    over = work.over_memory(job.max_memory)
    if over is not None and job.max_memory is not None:
        raise OptionError("max_memory", f"a write task of array {over.name!r} needs ~{over.projected_task_bytes} "
                          f"bytes, more than the limit of {job.max_memory}")
    reports = {n: ArrayReport(name=n, shape=tuple(full[n].shape), dtype=str(full[n].dtype),
                              chunks=math.prod(math.ceil(s / c) for s, c in zip(full[n].shape, w.inner, strict=True)),
                              chunks_written=0, logical_bytes=int((full[n].size - math.prod(store.arrays[n].shape))
                                                                  * full[n].dtype.itemsize),
                              stored_before=stored_sizes(store.path, n)[0], layout=w.layout,
                              projected_task_bytes=w.projected_task_bytes, units=len(w.pending), tasks=w.tasks)
               for n, w in work.arrays.items()}
    target = _Staging(staging)
    run = WriteRun(work, src, job.decision, job_id, {}, reports, job.scheduler, job.progress)
    graph_seconds = run_writes(write_tasks(run, target), reports, lambda n: stored_sizes(staging, n), job.scheduler,
                               job.progress, job_id=job_id)
    remove_temporaries(staging)
    root = json.loads(json.dumps(store.root))
    consolidated = (root.get("consolidated_metadata") or {}).get("metadata")
    if consolidated is not None:
        for n in along:
            if n in consolidated:
                consolidated[n]["shape"] = list(full[n].shape)
    stage_document(staging, "zarr.json", root)
    install(staging, store.path, along, _rewrites(units))
    from zopt.planning.readers import reader_line, store_arrays

    for rep in reports.values():
        rep.seconds = time.perf_counter() - t0
        rep.stored_after, rep.allocated_after = stored_sizes(store.path, rep.name)
    notes.append(Note(f"appended {full[along[0]].shape[units[along[0]][0]] - old} rows along {src.dim!r} to "
                      f"{store.path} ({old} before), with its chains, inner chunks and shards", "append"))
    return RecompressReport(dst=store.path, arrays=list(reports.values()), seconds=time.perf_counter() - t0,
                            source_bytes=src.total_bytes(), graph_seconds=graph_seconds, notes=notes, job=job,
                            readers=reader_line(store_arrays(store.path)))
