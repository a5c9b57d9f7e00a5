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

A local directory DST is appended to as above, an Icechunk branch in one commit
(``zopt.job.append_icechunk``); a zarr Store or an fsspec URL is refused (``OptionError`` naming
``append``). Options that would choose another layout or chain
(``chunks``/``shards`` other than DST's, ``codecs``, ``preset``, ``menu``, ``plan``, …) are refused
naming the option.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from typing import TYPE_CHECKING, Any

from zopt.compat.job_cache import release_job
from zopt.errors import OptionError
from zopt.io import locations as loc
from zopt.io.append_check import StoreDescription, describe_store
from zopt.io.multi import MultiSource
from zopt.io.paths import check_no_overlap, recover, resolve
from zopt.io.source_kinds import open_source
from zopt.job.append_plan import appended_note, plan_append, write_units
from zopt.job.reports import RecompressReport
from zopt.job.targets import stored_sizes
from zopt.notes import Note
from zopt.store.journal import Journal, ResumeMismatchError, fingerprint, remove_temporaries
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
        raise OptionError("before_publish", "(--verify) --append installs its files into dst as it goes: check the result "
                          "afterwards with zopt verify against the old and new files together")
    from zarr.abc.store import Store

    from zopt.compat.icechunk_compat import is_icechunk

    if is_icechunk(job.dst):
        return
    if isinstance(job.dst, Store) or loc.is_url(job.dst) and not str(job.dst).startswith("file://"):
        raise OptionError("append", f"dst {job.dst if isinstance(job.dst, str) else type(job.dst).__name__} is not "
                          "a local directory or an Icechunk branch: --append extends those (not a zarr Store or an "
                          "fsspec URL yet)")


class _Staging:
    """The ``WriteTarget`` of an append's tasks (``zopt.job.dask_graph.write_tasks``): the staging directory."""

    store = None

    def __init__(self, root: str) -> None:
        self.root = root
        self.journal = Journal(root)

    def shard_dir(self, name: str) -> str:
        return os.path.join(self.root, name)


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
    notes: list[Note] = []
    from zopt.compat.icechunk_compat import is_icechunk

    if is_icechunk(job.dst):
        return _to_branch(job, notes, t0)
    dst = resolve(loc.local_path(str(job.dst)))
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


def _to_branch(job: RecompressJob, notes: list[Note], t0: float) -> RecompressReport:
    """``zopt.job.append_icechunk``: one commit on an Icechunk branch."""
    from zopt.job.append_icechunk import append_to_branch

    src = open_source(job.src, concat_dim=job.concat_dim, combine=job.combine, scheduler=job.scheduler)
    assert isinstance(src, MultiSource)  # concat_dim: several files
    notes.extend([Note(f"src: {src.text}", "source"), *src.notes])
    job_id = uuid.uuid4().hex[:12]
    try:
        return append_to_branch(job, src, job_id, notes, t0)
    finally:
        release_job(job_id)


def _finish_install(staging: str, dst: str, notes: list[Note]) -> dict[str, Any] | None:
    """An install an earlier run began: finished (its record returned), else None."""
    if not installing(staging):
        return None
    record = Journal(staging).read()
    if record is None or "arrays" not in record:  # written before the install began: only damage removes it
        raise ResumeMismatchError(f"dst {dst!r}: {staging} holds an append being installed without its journal "
                                  "record; nothing was done: restore the record, or check dst and delete the folder")
    for name, docs in record.get("docs", {}).items():
        if _doc_digest(os.path.join(dst, name, "zarr.json")) not in docs:  # DST replaced since: not this append's
            raise ResumeMismatchError(f"dst {dst!r}: array {name!r} changed since the interrupted append staged in "
                                      f"{staging} began its install (another job replaced dst?); nothing was moved: "
                                      f"delete {staging} if dst is as it should be")
    moves = install(staging, dst, list(record["arrays"]), _rewrites(record["arrays"]))
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
    """Check, stage (or resume the staging of) the new units, install them into the local DST."""
    plan = plan_append(job, src, store, job_id, notes)
    fp = _fingerprint(job, src, store)
    journal = Journal(staging)
    record = journal.read()
    if record is not None:
        journal.check(record, fp, store.path)  # ResumeMismatchError: other files, or dst changed since
        remove_temporaries(staging)
        notes.append(Note(f"resumed the interrupted append in {staging}", "resumed"))
    else:
        shutil.rmtree(staging, ignore_errors=True)  # a run killed before its record: nothing of it is kept
        for n in plan.along:
            axis = plan.units[n][0]
            stage_document(staging, f"{n}/zarr.json", store.arrays[n].with_length(axis, plan.full[n].shape[axis]))
        journal.begin({**fp}, job_id, {n: store.arrays[n].layout for n in plan.along})
        _record_units(journal, plan.units, store.path, staging)
    from zopt.compat.zarr_compat import open_array

    before = {n: stored_sizes(store.path, n)[0] for n in plan.along}
    planned = {n: open_array(staging, path=n, mode="r") for n in plan.along}
    reports, graph_seconds = write_units(job, plan, store, _Staging(staging), planned, job_id, journal.done)
    remove_temporaries(staging)
    root = json.loads(json.dumps(store.root))
    consolidated = (root.get("consolidated_metadata") or {}).get("metadata")
    if consolidated is not None:
        for n in plan.along:
            if n in consolidated:
                consolidated[n]["shape"] = list(plan.full[n].shape)
    stage_document(staging, "zarr.json", root)
    install(staging, store.path, plan.along, _rewrites(plan.units))
    from zopt.planning.readers import reader_line, store_arrays

    for rep in reports.values():
        rep.seconds = time.perf_counter() - t0
        rep.stored_before = before[rep.name]
        rep.stored_after, rep.allocated_after = stored_sizes(store.path, rep.name)
    notes.append(appended_note(plan, store.path))
    return RecompressReport(dst=store.path, arrays=list(reports.values()), seconds=time.perf_counter() - t0,
                            source_bytes=src.total_bytes(), graph_seconds=graph_seconds, notes=notes, job=job,
                            readers=reader_line(store_arrays(store.path)))


def _doc_digest(path: str) -> str | None:
    """A digest of the metadata document at ``path`` (None: absent)."""
    import hashlib

    try:
        with open(path, "rb") as f:
            return hashlib.blake2b(f.read(), digest_size=16).hexdigest()
    except FileNotFoundError:
        return None


def _record_units(journal: Journal, units: dict[str, list[int]], dst: str, staging: str) -> None:
    """The partial unit of each array, and the digests of its ``zarr.json`` in DST now and as
    staged, kept in the journal's record for the install (``_finish_install`` checks DST against them)."""
    record = journal.read()
    assert record is not None
    record["arrays"] = units
    record["docs"] = {n: [_doc_digest(os.path.join(where, n, "zarr.json")) for where in (dst, staging)]
                      for n in units}
    from zopt.store.files import atomic_write

    atomic_write(journal.dir / "job.json", json.dumps(record, indent=1).encode(), fsync=True)
