"""Where a recompress job writes: the ``Target`` protocol, ``open_target`` and its kinds.

A ``Target`` is one destination, whatever it is: ``begin`` (made fresh or resumed), ``create``
(its metadata and journal), ``write`` (the plan of work's units), ``publish``, ``discard``, and
where its work is kept (``kept_text``). ``open_target(dst, opening)`` makes one: the first class
of ``TARGET_KINDS`` whose ``claims(dst)`` is true, opened by its ``open(dst, opening)``
(overlaps with the source refused, a local directory locked, nothing written). A new
destination is one class and one line in ``TARGET_KINDS``.

- ``IcechunkTarget`` (``zopt.job.icechunk_target``): a branch of an Icechunk repository;
- ``StoreTarget``: a ``zarr.abc.store.Store`` or fsspec URL, written in place (cleared first, and
  again on failure), one ``set`` per packed shard;
- ``LocalTarget``: a local directory ``dst``, written under ``dst.zopt-partial`` (with the job's
  journal, ``zopt.store.journal``) and renamed into place at the end (``zopt.io.paths.publish``).
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from zopt.compat.zarr_compat import NODE_EXISTS_ERRORS, existing_node_path
from zopt.io import locations as loc
from zopt.io.paths import (
    PARTIAL_SUFFIX,
    check_no_overlap,
    check_replaceable,
    check_store_replaceable,
    publish,
    recover,
    resolve,
    store_text,
)
from zopt.io.unfinished import (
    UNFINISHED_KEY,
    StoreTakenOverError,
    check_not_running,
    done_writing,
    mark_unfinished,
    owns,
    read_unfinished,
    remove_unfinished,
    taken_over_by,
)
from zopt.job.dask_graph import run_writes, write_tasks
from zopt.job.icechunk_target import IcechunkTarget
from zopt.job.opening import Opening, WriteRun
from zopt.job.targets import (
    PartialStoreGoneError,
    TargetSpec,
    check_no_url_overlap,
    create_target,
    destination,
    stored_sizes,
)
from zopt.notes import Note
from zopt.store.journal import Journal, remove_temporaries
from zopt.store.lock import destination_lock
from zopt.store.shards import remove_temp_files

if TYPE_CHECKING:
    from zarr.abc.store import Store

__all__ = ["TARGET_KINDS", "LocalTarget", "Opening", "StoreTarget", "Target", "WriteRun", "open_target"]


@runtime_checkable
class Target(Protocol):
    """A destination of ``zopt.recompress`` (see the module docstring).

    text : how messages name it. root : where the tasks write (a local partial directory or a zarr
    Store). journal : what an interrupted job resumes from (``zopt.store.journal.Journal``, an
    Icechunk commit's), or None (written in place, never resumed). positional : whether shards can be
    written at slot offsets (``layout="fixed-slot"``). consolidates : whether consolidated metadata
    is written at the publish. kept_text : where an interrupted or refused job's work is kept."""

    @property
    def text(self) -> str: ...

    @property
    def root(self) -> Any: ...

    @property
    def journal(self) -> Any: ...

    @property
    def positional(self) -> bool: ...

    @property
    def consolidates(self) -> bool: ...

    @property
    def kept_text(self) -> str: ...

    def store_of(self) -> Any:
        """None for a local directory, else the store it writes (or its text): a hierarchy of child
        groups is rewritten into a local directory only."""
        ...

    def begin(self, fresh: bool, job_id: str, src_text: str) -> None:
        """Before anything is written: made fresh (``fresh``) or resumed as the journal found it."""
        ...

    def create(self, spec: TargetSpec, fp: dict[str, Any] | None, job_id: str,
               layouts: dict[str, Any]) -> None:
        """A fresh target's metadata (``create_target``), then its journal's record of the job."""
        ...

    def tasks(self, run: WriteRun) -> list[tuple[str, Any]]:
        """``(array name, Delayed)`` of the run's write units, built, not run (``--dry-run``)."""
        ...

    def write(self, run: WriteRun) -> float:
        """Write every pending unit of ``run.work``, fill ``run.reports`` (masks, chunks, stored
        bytes). Returns the graph seconds."""
        ...

    def stored_sizes(self, name: str) -> tuple[int, int]:
        """(apparent, allocated) bytes of array ``name``'s chunks as written."""
        ...

    def written(self) -> Any:
        """What holds the written store before the publish (a path or a zarr Store), as zarr opens it."""
        ...

    def output(self) -> Any:
        """What ``before_publish`` receives: the partial directory, the Store, an Icechunk commit's URL."""
        ...

    def publish(self) -> None:
        """Make the written store the destination, atomically."""
        ...

    def discard(self) -> None:
        """Remove what this job wrote (never another job's)."""
        ...

    def gone(self, exc: BaseException) -> BaseException | None:
        """The error in words when ``exc`` came from the target removed under the job, else None."""
        ...

    def end(self) -> None:
        """The job has ended, however (registered on ``Opening.hold``)."""
        ...


def open_target(dst: object, opening: Opening) -> Target:
    """``dst`` as a ``Target``: the first of ``TARGET_KINDS`` that claims it, opened (overlaps with
    ``opening.sources`` refused with OverlapError, an existing ``dst`` refused without ``overwrite``,
    a local directory locked into ``opening.hold``: ``StoreLockedError`` for a second job; nothing
    written). A layout of fixed slots where the destination has no positional writes is a note."""
    kind = next(k for k in TARGET_KINDS if k.claims(dst))  # LocalTarget claims whatever is left
    target: Target = kind.open(dst, opening)
    if opening.layout == "fixed-slot" and not target.positional:
        opening.notes.append(Note(f"layout: fixed slots need positional writes (a local directory store); {target.text} "
                                  "has none, so each shard was assembled packed inside one task and written with one put",
                                  "layout"))
    if opening.hold is not None:
        opening.hold.callback(target.end)
    return target


class LocalTarget:
    """A local directory ``dst``: written under ``dst.zopt-partial``, which holds the journal, and
    renamed into place by ``publish``."""

    store = None  # shard tasks write files at paths
    positional = True
    consolidates = True

    @classmethod
    def claims(cls, dst: object) -> bool:
        return True  # the last kind: a path (or a file:// URL)

    @classmethod
    def open(cls, dst: object, opening: Opening) -> LocalTarget:
        """``dst`` resolved on the client, SRC/DST overlaps refused, locked, a killed job's aside copy
        recovered, an existing store replaced only with ``overwrite``."""
        path = destination(dst)[1]
        assert path is not None  # claimed after StoreTarget: a path
        dst = resolve(path)
        for one in opening.sources:
            if not loc.is_url(one):
                check_no_overlap(one, dst)
        if opening.hold is not None:  # one job per DST: StoreLockedError for a second one, nothing written
            opening.hold.enter_context(destination_lock(dst, "recompress"))
        recovered = recover(dst)
        if recovered:
            opening.notes.append(Note(recovered, "recovered"))
        check_replaceable(dst, opening.overwrite)
        return cls(dst)

    def __init__(self, dst: str) -> None:
        self.dst = dst
        self.root = dst.rstrip("/") + PARTIAL_SUFFIX
        self.journal = Journal(self.root)
        self.text = dst

    @property
    def kept_text(self) -> str:
        return self.root

    def store_of(self) -> None:
        return None

    def shard_dir(self, name: str) -> str:
        return os.path.join(self.root, name)

    def begin(self, fresh: bool, job_id: str, src_text: str) -> None:
        """Before creating (``fresh``: a partial store without a journal is a job killed before
        its plan of work was recorded, removed) or resuming (its temporary files removed)."""
        if fresh:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            remove_temporaries(self.root)

    def create(self, spec: TargetSpec, fp: dict[str, Any] | None, job_id: str, layouts: dict[str, Any]) -> None:
        assert fp is not None  # a target with a journal: plan_of_work fingerprinted the job
        create_target(spec, self.root)
        self.journal.begin(fp, job_id, layouts)  # once the metadata exists: a partial store without it starts over

    def tasks(self, run: WriteRun) -> list[tuple[str, Any]]:
        return write_tasks(run, self)

    def write(self, run: WriteRun) -> float:
        seconds = run_writes(self.tasks(run), run.reports, self.stored_sizes, run.scheduler, run.progress,
                             job_id=run.job_id)
        self.after_writes()
        return seconds

    def stored_sizes(self, name: str) -> tuple[int, int]:
        return stored_sizes(self.root, name)

    def after_writes(self) -> None:
        remove_temp_files(self.root)  # e.g. a slot writer Dask re-ran after its shard's finalize: not published

    def written(self) -> str:
        return self.root

    def output(self) -> str:
        return self.root

    def publish(self) -> None:
        self.journal.remove()  # DST never holds the journal; a kill right here only means starting over
        publish(self.root, self.dst)  # the old DST, if any, is renamed aside and deleted only once the new one is in place

    def discard(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def gone(self, exc: BaseException) -> PartialStoreGoneError | None:
        """A job that failed because its partial store was removed while it ran (zarr or a rename then
        names only the missing path): the error in words."""
        if not isinstance(exc, Exception) or os.path.isdir(self.root):
            return None
        return PartialStoreGoneError(
            f"dst {self.dst!r}: its partial store {self.root!r} was removed while the job was writing it, by "
            f"another process (a clean-up, or a job that does not take zopt's lock {self.dst}.zopt-lock); nothing "
            f"was published{'' if os.path.lexists(self.dst) else ' (DST does not exist)'}: run the job again")

    def end(self) -> None:
        pass  # the lock, if any, is released by the hold


class StoreTarget:
    """A zarr Store without positional writes or rename: written in place, cleared first and on failure.

    Not locked (an object store has no lock zopt can take): a store holding the marker of a live job of
    this host is refused (``zopt.io.unfinished.check_not_running``), and a job whose marker another job
    replaced (it cleared the store) fails at its end instead of publishing, and leaves the store to it."""

    journal = None
    job_id: str | None = None  # the job id of the marker, once put
    positional = False
    consolidates = True

    @classmethod
    def claims(cls, dst: object) -> bool:
        """A ``zarr.abc.store.Store``, or a URL other than ``file://``."""
        from zarr.abc.store import Store

        return isinstance(dst, Store) or (isinstance(dst, str | os.PathLike) and loc.is_url(dst))

    @classmethod
    def open(cls, dst: object, opening: Opening) -> StoreTarget:
        """SRC/DST URL overlaps refused; a store holding anything but a Zarr store refused, one holding
        another live job's marker refused (``StoreLockedError``), an existing one replaced only with
        ``overwrite``."""
        store = destination(dst)[0]
        assert store is not None  # claimed: a Store or a URL
        for one in opening.sources:
            check_no_url_overlap(one, store)
        holds = check_store_replaceable(store, opening.overwrite, store_text(store), (UNFINISHED_KEY,))
        if holds:
            check_not_running(store, store_text(store))  # a live job's marker (this host): StoreLockedError
        return cls(store, clear=holds)

    def __init__(self, store: Store, clear: bool = True) -> None:
        self.store = self.root = store
        self.text = store_text(store)
        self.clear = clear  # False: it held nothing when checked; clearing it now could only delete another job's

    @property
    def kept_text(self) -> str:
        return self.text

    def store_of(self) -> Any:
        return self.store

    def shard_dir(self, name: str) -> str:
        return name  # the array's key prefix

    def begin(self, fresh: bool, job_id: str, src_text: str) -> None:
        """Cleared, then marked unfinished until ``publish`` before the target's first key is written
        (``zopt.io.unfinished``: a killed job's store is recognisable as such, from its first
        ``zarr.json`` on)."""
        if self.clear:
            self._clear()
        if not fresh:
            return
        other = read_unfinished(self.store)  # cleared above: a marker now is a job that began since
        if other is not None:
            raise self.taken_over(other)
        if not self.clear and _sync_exists(self.store, "zarr.json"):
            # found empty, now written (even published) by another job: this job deleted nothing, so it
            # stops before its marker. One that cleared may have deleted the other's marker: it marks
            # the store and yields (below), so that the store never looks finished while written
            raise self.taken_over(None)
        self.job_id, self.src = job_id, src_text
        mark_unfinished(self.store, job_id, src_text)
        if _sync_exists(self.store, "zarr.json"):  # another job put its marker and metadata in the same moments
            raise self.taken_over(read_unfinished(self.store), only_marker=True)

    def create(self, spec: TargetSpec, fp: dict[str, Any] | None, job_id: str, layouts: dict[str, Any]) -> None:
        try:
            create_target(spec, self.store)
        except NODE_EXISTS_ERRORS as exc:
            # a store this job cleared or found empty: another job wrote metadata since (at the root: before
            # this job wrote any, so only its marker is left to yield)
            raise self.taken_over(read_unfinished(self.store), only_marker=existing_node_path(exc) == "") from exc

    def taken_over(self, other: dict[str, Any] | None, only_marker: bool = False) -> StoreTakenOverError:
        """The error of a job that found another job writing its store after it cleared it (or found
        it empty): that job's marker, or its root metadata. This job stops, leaving the store to that
        job. ``only_marker``: the other job's root metadata appeared after this job's marker (so after
        its clear), and this job wrote nothing else: its marker is marked yielded, and the other job
        publishes as usual (``zopt.io.unfinished.remove_unfinished``)."""
        mine = owns(other, self.job_id)
        if only_marker and mine and self.job_id is not None:  # mine: the marker names this job
            mark_unfinished(self.store, self.job_id, self.src, yielded=True)
        self.job_id = None  # nothing of the store is this job's to clear or unmark
        who = "" if not other or mine else " (" + ", ".join(f"{k} {other[k]}" for k in ("job", "started", "host", "pid")
                                                            if k in other) + ")"
        return StoreTakenOverError(f"dst {self.text}: another zopt job{who} began writing the store in the same "
                                   "moments as this one; this job stops and leaves the store to it: run one job at a "
                                   "time per store")

    def tasks(self, run: WriteRun) -> list[tuple[str, Any]]:
        return write_tasks(run, self)

    def write(self, run: WriteRun) -> float:
        return run_writes(self.tasks(run), run.reports, self.stored_sizes, run.scheduler, run.progress,
                          job_id=run.job_id)

    def stored_sizes(self, name: str) -> tuple[int, int]:
        return stored_sizes(self.store, name)

    def written(self) -> Any:
        return self.store

    def output(self) -> Any:
        return self.store

    def publish(self) -> None:
        remove_unfinished(self.store, self.job_id, self.text)  # written in place: the marker goes last, if still ours

    def discard(self) -> None:
        if owns(read_unfinished(self.store), self.job_id):  # never another job's store, written or being written
            self._clear()

    def gone(self, exc: BaseException) -> StoreTakenOverError | None:
        """An error of this job after another job cleared its store (its marker replaced or gone):
        the takeover in words, since zarr's own error ("No group found", a missing array) would not
        say why. None while the marker is still this job's (or yielded to it)."""
        if self.job_id is None or isinstance(exc, StoreTakenOverError):
            return None
        try:
            return taken_over_by(self.store, self.job_id, self.text)
        except Exception:  # the store cannot be read now: the error stays as it is
            return None

    def end(self) -> None:
        """The job has ended, however: its marker, if left, is no longer a live job's in this process."""
        done_writing(self.job_id)

    def _clear(self) -> None:
        from zarr.core.sync import sync

        sync(self.store.delete_dir(""))


def _sync_exists(store: Store, key: str) -> bool:
    from zarr.core.sync import sync

    return bool(sync(store.exists(key)))


#: the destinations ``open_target`` tries, in order: the first whose ``claims(dst)`` is true
TARGET_KINDS: tuple[Any, ...] = (
    IcechunkTarget,  # icechunk:// URLs and icechunk.Repository
    StoreTarget,  # a zarr Store, an fsspec URL
    LocalTarget,  # a local directory
)
