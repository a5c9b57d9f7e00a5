"""An Icechunk branch as a recompress destination: written on a work branch, published by moving the branch.

``IcechunkTarget`` (``dst`` = ``icechunk://PATH[@BRANCH]``, ``icechunk+s3://BUCKET/PREFIX[@BRANCH]``
or an ``icechunk.Repository``; see ``zopt.compat.icechunk_compat``):

1. ``start``: the work branch ``zopt-work-<BRANCH>`` is made at the target branch's tip (the
   job's *base*); the target metadata is written there and committed with the job's record
   (fingerprint: zopt version, source identity, options; layouts; base) in the commit metadata.
2. ``run``: the write units go in *waves*; each wave's tasks write through their own copy of a
   ``ForkSession`` (Icechunk's session for Dask workers) and return it; the client merges the
   forks and commits the wave, with the units done so far in the commit metadata (on icechunk
   2.x by amending the job's one commit, on 1.1 as one more commit). A killed job resumes from
   the work branch's last commit: only units it does not list are written again.
3. ``publish``: ``reset_branch(BRANCH, job commit, from_snapshot_id=base)``: the target branch
   moves in one step, only if it still points at the base (else ``BranchMovedError``, nothing
   published); readers of the branch see the old snapshot or the new one, never part of a job.
   ``--verify`` reads the job's commit before that (``root_text``: ``…@snapshot:ID``).

Icechunk has no positional writes: shards are packed and put whole (``layout="fixed-slot"``
falls back to that, with a note, as for ``StoreTarget``). Consolidated metadata is not written
(Icechunk serves metadata from its snapshot and refuses it).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import socket
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.compat import icechunk_compat as icc
from zopt.compat.scheduling import compute
from zopt.errors import OptionError, ZoptError
from zopt.io.paths import check_store_replaceable
from zopt.job.dask_graph import write_tasks
from zopt.job.graph import unit_key
from zopt.job.opening import Opening, WriteRun
from zopt.job.progress import SharedBar
from zopt.job.targets import TargetSpec, create_target
from zopt.job.tasks import ChunkJob, Masks, ShardJob, write_packed_shard, write_region
from zopt.store.journal import ResumeMismatchError
from zopt.store.lock import StoreLockedError, running_on_this_host

if TYPE_CHECKING:
    from dask.delayed import Delayed
    from icechunk import Repository
    from zarr.abc.store import Store

__all__ = ["WAVE_UNITS", "IcechunkTarget", "RECORD_KEY", "WorkBranchChangedError"]

RECORD_KEY = "zopt"
WAVE_UNITS = 256  # write units per wave (one commit each): what a killed job redoes at most
_FORMAT = 1


class WorkBranchChangedError(ZoptError, RuntimeError):
    """Another job made, moved or removed the work branch while this job wrote it: this job's work
    is not published, and the branch is left to that job."""


class IcechunkTarget:
    """A branch of an Icechunk repository (see the module docstring), a ``zopt.job.destinations.Target``."""

    consolidates = False
    positional = False  # shards are packed and put whole

    @classmethod
    def claims(cls, dst: object) -> bool:
        return icc.is_icechunk(dst)

    @classmethod
    def open(cls, dst: object, opening: Opening) -> IcechunkTarget:
        """``RepositoryNotFoundError`` for a missing repository or branch; an existing store on the
        branch replaced only with ``opening.overwrite``; nothing written."""
        assert icc.is_icechunk(dst)  # claimed
        return cls(dst, opening.overwrite)

    def __init__(self, dst: str | Repository, overwrite: bool) -> None:
        ref = icc.open_ref(dst)  # RepositoryNotFoundError: nothing touched
        if ref.branch is None:
            raise OptionError("dst", f"{ref.text} names a snapshot; a destination is a branch (icechunk://PATH@BRANCH)")
        self.repo, self.branch, self.text = ref.repo, ref.branch, ref.text
        self.work_branch = f"zopt-work-{self.branch}"
        self.base = self.repo.lookup_branch(self.branch)
        self.session: Any = None
        self.snapshot: str | None = None  # the job's commit, once written
        self.created = False  # this job made the work branch (and has not committed yet while snapshot is None)
        self.lost = False  # another job changed the work branch under this one
        self.journal = _CommitJournal(self)
        self.record: dict[str, Any] = {}  # the job's record, in its commits' metadata (``record_job``)
        self.src_text = ""
        self.overwrite = overwrite
        self.published = self._published_record()
        if self.published is None:  # else: checked once the job's fingerprint is known (_CommitJournal.check)
            self._check_replaceable()

    def _check_replaceable(self) -> None:
        check_store_replaceable(self.repo.readonly_session(snapshot_id=self.base).store, self.overwrite, self.text)

    def _published_record(self) -> dict[str, Any] | None:
        """The record of a job that moved the branch to its commit and was killed before removing its
        work branch (the work branch then points at the branch's tip, a complete zopt commit), else None."""
        ic = icc.require()
        try:
            if self.repo.lookup_branch(self.work_branch) != self.base:
                return None
        except (ic.IcechunkError, KeyError):  # no work branch (or removed meanwhile)
            return None
        record = (self.repo.lookup_snapshot(self.base).metadata or {}).get(RECORD_KEY)
        ok = isinstance(record, dict) and record.get("format") == _FORMAT and record.get("complete")
        return record if ok else None

    # -- the Target protocol (zopt.job.destinations) ------------------------------------------
    @property
    def store(self) -> Store | None:
        return None if self.session is None else self.session.store

    @property
    def root(self) -> Store | None:
        return self.store

    def store_of(self) -> Store | str:
        return self.store or self.text

    def shard_dir(self, name: str) -> str:
        return name  # the array's key prefix (``--dry-run`` builds the tasks of a store destination)

    def begin(self, fresh: bool, job_id: str, src_text: str) -> None:
        self.src_text = src_text  # the commit messages name the source
        self.start(fresh)

    def create(self, spec: TargetSpec, fp: dict[str, Any] | None, job_id: str, layouts: dict[str, Any]) -> None:
        """The target metadata on the work branch, committed with the job's record (``record_job``)."""
        store = self.root
        assert store is not None  # begun: the work session's store
        create_target(spec, store)
        self.journal.begin(fp, job_id, layouts)

    def tasks(self, run: WriteRun) -> list[tuple[str, Delayed]]:
        return write_tasks(run, self)

    def write(self, run: WriteRun) -> float:
        """Waves of forked sessions, each merged and committed (``run``)."""
        return self.run(run)

    def written(self) -> Store | None:
        """The job's commit (its work session's store is not where the waves of forked sessions wrote)."""
        if self.snapshot is not None:
            store: Store = self.repo.readonly_session(snapshot_id=self.snapshot).store
            return store
        return self.root

    def output(self) -> str:
        return self.root_text

    def gone(self, exc: BaseException) -> None:
        return None  # another job changing the work branch is WorkBranchChangedError, raised where found

    def end(self) -> None:
        pass  # no marker: the work branch's commits say which job wrote it

    @property
    def root_text(self) -> str:
        """The job's commit as a URL ``zopt verify`` reads (``…@snapshot:ID``), else the branch."""
        repo_text = self.text.rpartition("@")[0]
        return f"{repo_text}@snapshot:{self.snapshot}" if self.snapshot else self.text

    @property
    def kept_text(self) -> str:
        """Where an interrupted or refused job's work is kept, for its error note: the work branch,
        with its URL (``icechunk://PATH@zopt-work-BRANCH``, what ``zopt verify``/``info`` open) for a URL destination."""
        repo_text = self.text.rpartition("@")[0]
        url = f" ({repo_text}@{self.work_branch})" if icc.is_icechunk_url(repo_text) else ""
        return f"branch {self.work_branch!r} of {repo_text}{url}"

    def start(self, fresh: bool) -> None:
        """``fresh``: the work branch (re)made at the base and cleared; else resumed as it is.
        ``WorkBranchChangedError`` when another job makes or removes the work branch meanwhile."""
        if fresh:
            ic = icc.require()
            try:
                if self.work_branch in self.repo.list_branches():  # nothing to resume there (the journal said so)
                    self.repo.delete_branch(self.work_branch)
                self.repo.create_branch(self.work_branch, self.base)
            except (ic.IcechunkError, ic.ConflictError) as exc:  # another job made (or removed) it meanwhile
                raise self._changed(exc) from exc
            self.created = True
            with self._alone():
                self.session = self.repo.writable_session(self.work_branch)
            from zarr.core.sync import sync

            sync(self.session.store.delete_dir(""))
        else:
            with self._alone():
                self.snapshot = self.repo.lookup_branch(self.work_branch)  # the interrupted job's, now this one's
                self.session = self._session()

    def _mine(self) -> bool:
        """Whether the work branch is still this job's: at its last commit (or, before its first, at
        the base where this job made it)."""
        ic = icc.require()
        if self.lost:
            return False
        try:
            tip = self.repo.lookup_branch(self.work_branch)
        except (ic.IcechunkError, KeyError):
            return False
        return tip == self.snapshot if self.snapshot else (self.created and tip == self.base)

    def _changed(self, exc: BaseException) -> WorkBranchChangedError:
        self.lost = True  # the work branch is another job's now: never removed by this one (``_mine``)
        why = next((line.strip(" x|") for line in str(exc).splitlines() if line.strip(" x|")), type(exc).__name__)
        return WorkBranchChangedError(
            f"dst {self.text}: another job changed the work branch {self.work_branch!r} while this one was writing it "
            f"(icechunk: {why}); this job's work is not published and the branch is left to that job: run one job "
            "at a time per branch")

    @contextlib.contextmanager
    def _alone(self) -> Iterator[None]:
        """Icechunk's errors from another job writing the same work branch, as ``WorkBranchChangedError``."""
        ic = icc.require()
        try:
            yield
        except (ic.IcechunkError, ic.ConflictError) as exc:
            # a conflict, or the branch not found (removed, maybe re-made at the base): only another job does that
            gone = isinstance(exc, ic.ConflictError | KeyError) or "not found" in str(exc)
            if gone or not self._mine():
                raise self._changed(exc) from exc
            raise

    def stored_sizes(self, name: str) -> tuple[int, int]:
        from zarr.core.sync import sync

        # this job's last commit: the work branch may be another job's by now (then ``run`` fails in words)
        store = (self.repo.readonly_session(snapshot_id=self.snapshot) if self.snapshot
                 else self.repo.readonly_session(branch=self.work_branch)).store
        chunks = f"{name}/c/" if name else "c/"

        async def total() -> int:  # icechunk lists whole nodes only: the array's keys, then its chunk keys
            return sum([await store.getsize(k) async for k in store.list_prefix(name) if k.startswith(chunks)])

        n = sync(total())
        return n, n

    def publish(self) -> None:
        """Move the target branch to the job's commit, only if it still points at the base."""
        ic = icc.require()
        tip = self.repo.lookup_branch(self.branch)
        if tip != self.base:
            raise icc.BranchMovedError(self._moved(tip))
        if self.snapshot != tip:  # else published by the interrupted run of this job: only its work branch is left
            assert self.snapshot is not None  # the job's commit (run)
            try:
                self.repo.reset_branch(self.branch, self.snapshot, from_snapshot_id=self.base)
            except ic.IcechunkError as exc:  # moved between the lookup and the reset
                raise icc.BranchMovedError(self._moved(self.repo.lookup_branch(self.branch))) from exc
        self._remove_work_branch()

    def discard(self) -> None:
        self._remove_work_branch()

    def _remove_work_branch(self) -> None:
        """Remove the work branch while it is this job's (never another job's); already gone is fine."""
        if not self._mine():
            return
        try:
            self.repo.delete_branch(self.work_branch)
        except Exception:
            if self.work_branch in self.repo.list_branches():
                raise

    def _moved(self, tip: str) -> str:
        return (f"dst: branch {self.branch!r} of {self.text} moved since the job started ({self.base} → {tip}); "
                "nothing was published: run the job again on the new tip")

    # -- the job's commits ------------------------------------------------------------------
    def record_job(self, fp: dict[str, Any] | None, job_id: str, layouts: dict[str, Any]) -> None:
        self.record = {"format": _FORMAT, "fingerprint": fp, "job": job_id, "base": self.base, "branch": self.branch,
                       "pid": os.getpid(), "host": socket.gethostname(),  # a live job is not resumed by another
                       "layouts": {n: [list(i), None if s is None else list(s)] for n, (i, s) in layouts.items()},
                       "done": {}, "complete": False}
        self._commit(first=True)

    def _commit(self, first: bool = False) -> None:
        # each title says what its commit holds; the job's state is in the metadata (icechunk 1.1 keeps a commit per
        # wave in the published history, where a work-in-progress title would read as an unfinished job)
        units = sum(map(len, self.record["done"].values()))
        title = f"zopt recompress {self.src_text} → {self.text}"
        message = (title if self.record["complete"] else f"{title}: target metadata" if not units
                   else f"{title}: first {units} units")
        with self._alone():
            self.snapshot = icc.commit_wave(self.session, message, {RECORD_KEY: self.record}, amend=not first)
            self.session = self._session()

    def _session(self) -> Any:
        """A writable session of the work branch at this job's last commit (``WorkBranchChangedError`` if
        another job moved the branch in between)."""
        session = self.repo.writable_session(self.work_branch)
        if self.snapshot and session.snapshot_id != self.snapshot:
            raise self._changed(RuntimeError(f"branch {self.work_branch!r} is no longer at this job's last commit"))
        return session

    def run(self, run: WriteRun) -> float:
        """Write every pending unit of ``run.work`` in waves of ``WAVE_UNITS`` (each merged and committed),
        the last one marked complete; one progress bar (``run.progress(n_units)``) over all waves; the
        masks and chunks of each unit go into ``run.reports``. Returns the graph seconds."""
        units = [(name, coords) for name, w in run.work.arrays.items() for coords in w.pending]
        bar = run.progress(len(units)) if run.progress is not None and units else None
        try:
            with bar if bar is not None else contextlib.nullcontext():
                seconds = self._waves(units, run, bar)
        except Exception as exc:  # e.g. a task writing into a session another job's branch changed under it
            if isinstance(exc, WorkBranchChangedError) or self._mine():
                raise
            raise self._changed(exc) from exc
        if not units and not self.record["complete"] and icc.version() >= (2, 0):
            self.record["complete"] = True  # resumed after its last wave: the commit message says so
            self._commit()
        if not self._mine():  # self.snapshot: this job's last commit; the branch must still be there
            raise self._changed(RuntimeError(f"branch {self.work_branch!r} is no longer at this job's last commit"))
        for name, rep in run.reports.items():
            rep.stored_after, rep.allocated_after = self.stored_sizes(name)
        self.session = None  # --verify and publish read the committed snapshot
        return seconds

    def _waves(self, units: list[tuple[str, tuple[int, ...]]], run: WriteRun,
               bar: AbstractContextManager[object] | None) -> float:
        import time

        import dask

        job_id, reports = run.job_id, run.reports
        seconds = 0.0
        for start in range(0, len(units), WAVE_UNITS):
            wave = units[start:start + WAVE_UNITS]
            fork = self.session.fork()
            tasks = [dask.delayed(_write_unit, pure=False)(
                _unit_job(run, name, coords), fork, coords, dask_key_name=unit_key("ice", name, coords, job_id))
                for name, coords in wave]
            t0 = time.perf_counter()
            results = compute(tasks, run.scheduler, None if bar is None else lambda n: SharedBar(bar), job_id)
            seconds += time.perf_counter() - t0
            self.session.merge(*(f for _, _, f in results))
            for (name, coords), (masks, n, _) in zip(wave, results, strict=True):
                reports[name].masks.update(masks)
                reports[name].chunks_written += n
                self.record["done"].setdefault(name, {})[".".join(map(str, coords)) or "0"] = [
                    {str(k): v for k, v in masks.items()}, n]
            self.record["complete"] = start + WAVE_UNITS >= len(units)  # the last wave's commit is the job's
            self._commit()
        return seconds


def _unit_job(run: WriteRun, name: str, coords: tuple[int, ...]) -> tuple[ChunkJob | ShardJob, tuple[slice, ...] | None]:
    """The job of array ``name``'s units (its ``dst``/``store``: each task's fork of the session,
    ``_write_unit``) and the region of unit ``coords`` where it is a chunk (None: a shard)."""
    w = run.work.arrays[name]
    lossy = run.lossy.get(name)
    if w.shard_layout is None:  # unsharded
        return ChunkJob(run.src, name, "", run.decision, w.plan, run.job_id, lossy), w.region(coords)
    return ShardJob(run.src, name, name, w.shard_layout, w.shape, run.decision, run.job_id, w.chunk_key_encoding,
                    w.plan, None, lossy), None


@with_zopt_pipeline
def _write_unit(job: tuple[ChunkJob | ShardJob, tuple[slice, ...] | None], fork: object, coords: tuple[int, ...]
                ) -> tuple[Masks, int, object]:
    """Dask task: write unit ``coords`` of an array (``_unit_job``) through a fresh copy of the job's
    ``ForkSession`` ``fork``; returns it with ``(masks, chunks written)`` for the client to merge.
    Idempotent: a re-run writes the same keys."""
    mine = icc.fresh_fork(fork)
    unit, region = job
    if isinstance(unit, ShardJob):
        masks, n = write_packed_shard(dataclasses.replace(unit, store=mine.store), coords)
    else:
        assert region is not None  # a chunk's
        masks, n = write_region(dataclasses.replace(unit, dst=mine.store), region)
    return masks, n, mine


class _CommitJournal:
    """The journal interface (``zopt.store.journal.Journal``) over the work branch's last commit."""

    def __init__(self, target: IcechunkTarget) -> None:
        self.target = target

    def read(self) -> dict[str, Any] | None:
        t = self.target
        record = self._read()
        if t.published is not None and record is not t.published:  # that work branch went meanwhile (its job ended)
            t.published = None
            t._check_replaceable()  # the branch holds that job's store: replaced only with overwrite
        if record is not None and running_on_this_host(record) and record["pid"] != os.getpid():
            raise StoreLockedError(t.text, record, t.work_branch, message=(
                f"dst {t.text} is being written by another zopt job (job {record.get('job')}, pid {record['pid']} on "
                f"host {record['host']!r}; its work branch {t.work_branch!r}): wait for it to finish"))
        t.record = record if record is not None else {}  # none yet: ``record_job`` makes the job's
        return record

    def _read(self) -> dict[str, Any] | None:
        t = self.target
        ic = icc.require()
        for attempt in range(3):  # another job may remove and re-make the work branch between two calls
            try:
                tip = t.repo.lookup_branch(t.work_branch)
                break
            except (ic.IcechunkError, KeyError) as exc:  # no work branch (icechunk 1.1: IcechunkError "ref not found")
                if t.work_branch not in t.repo.list_branches():
                    return None
                if attempt == 2:
                    raise t._changed(exc) from exc
        if tip == t.base:  # a job published, then killed before removing its work branch: finished if it was this job
            return t.published
        record = (t.repo.lookup_snapshot(tip).metadata or {}).get(RECORD_KEY)
        return record if isinstance(record, dict) and record.get("format") == _FORMAT else None

    def check(self, record: dict[str, Any], fp: dict[str, Any], dst: str) -> None:
        """ResumeMismatchError unless ``record`` is this job's, started at the branch's tip. The record of a
        job that published and was killed before removing its work branch (``IcechunkTarget.published``):
        this job's is finished by publishing nothing more; another's work branch is removed (``read`` then
        returns None), and the branch is then replaced only with ``overwrite``."""
        from zopt.store.journal import Journal

        t = self.target
        journal = Journal(f"{t.text} (branch {t.work_branch!r})")
        if t.published is not None and record is t.published:
            try:
                journal.check(record, fp, dst)
            except ResumeMismatchError:  # another job's, already published: its work branch holds nothing more
                t.repo.delete_branch(t.work_branch)
                t.published = None
                t._check_replaceable()  # the branch holds that job's store: replaced only with overwrite
            return  # this job's: resumed with every unit done, the branch already at its commit
        if record.get("base") != t.base:
            raise ResumeMismatchError(
                f"resume: branch {t.branch!r} of {t.text} moved since the interrupted job started "
                f"({record.get('base')} → {t.base}); delete branch {t.work_branch!r} to start over")
        journal.check(record, fp, dst)

    def begin(self, fp: dict[str, Any] | None, job_id: str, layouts: dict[str, Any]) -> None:
        self.target.record_job(fp, job_id, layouts)

    def marker(self, name: str, coords: tuple[int, ...]) -> None:
        return None

    def done(self, name: str) -> dict[str, tuple[Masks, int]]:
        found = self.target.record.get("done", {}).get(name, {})
        return {k: (collections.Counter({int(m): c for m, c in masks.items()}), int(n)) for k, (masks, n) in found.items()}

