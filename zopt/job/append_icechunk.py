"""``recompress(..., append=True)`` into a branch of an Icechunk repository: one commit per append.

The new files are checked against the branch's tip as against a local store (``zopt.job.append``);
then, in one writable session of the branch: each array along the concat dimension is resized (its
metadata), the units from DST's last partly filled one on are written whole by the job's usual
tasks (packed shards put whole, ``StoreTarget``-like), and the session is committed once, with the
source in the commit's metadata. Readers of the branch see the old snapshot or the new one (Icechunk
commits are atomic); a killed append leaves the branch as it was (the session is never committed),
and the same command does it again. Two appends to one branch: the second to commit finds the
branch moved and fails (``BranchMovedError``), nothing of it committed. Runs on the threaded or
synchronous scheduler (the tasks write through the client's session).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from zopt.compat import icechunk_compat as icc
from zopt.errors import OptionError
from zopt.io.append_check import describe_zarr_store
from zopt.io.multi import MultiSource
from zopt.job.append_plan import appended_note, plan_append, write_units
from zopt.job.reports import RecompressReport
from zopt.notes import Note

if TYPE_CHECKING:
    from zarr.abc.store import Store

    from zopt.job.options import RecompressJob

__all__ = ["append_to_branch"]

#: the schedulers whose tasks share the client's session
_SHARED = (None, "threads", "threading", "synchronous", "sync", "single-threaded")


class _Session:
    """The ``WriteTarget`` of the tasks: the writable session's store, keys by array name, no journal."""

    journal = None

    def __init__(self, store: Store) -> None:
        self.store = self.root = store

    def shard_dir(self, name: str) -> str:
        return name


def _measure(store: Store) -> Callable[[str], tuple[int, int]]:
    """(apparent, allocated) bytes of an array's chunks in the session (Icechunk lists whole nodes only)."""
    from zarr.core.sync import sync

    def measure(name: str) -> tuple[int, int]:
        async def total() -> int:
            return sum([await store.getsize(k) async for k in store.list_prefix(name) if k.startswith(f"{name}/c/")])

        n = sync(total())
        return n, n

    return measure


def append_to_branch(job: RecompressJob, src: MultiSource, job_id: str, notes: list[Note],
                     t0: float) -> RecompressReport:
    """Append ``src`` to the Icechunk branch ``job.dst`` in one commit (see the module docstring)."""
    import zarr

    from zopt.compat.zarr_compat import open_array

    if job.scheduler not in _SHARED:
        raise OptionError("scheduler", f"{job.scheduler!r}: an append to an Icechunk branch writes through one "
                          "session of the client: use the threaded (default) or synchronous scheduler")
    assert icc.is_icechunk(job.dst)  # an icechunk URL or Repository (zopt.job.append dispatched on it)
    ref = icc.open_ref(job.dst)  # RepositoryNotFoundError: nothing touched
    if ref.branch is None:
        raise OptionError("dst", f"{ref.text} names a snapshot; --append extends a branch (icechunk://PATH@BRANCH)")
    session = ref.repo.writable_session(ref.branch)
    base = session.snapshot_id
    old = describe_zarr_store(ref.repo.readonly_session(snapshot_id=base).store, ref.text)
    plan = plan_append(job, src, old, job_id, notes)
    store = session.store
    planned = {}
    for n in plan.along:
        array = zarr.open_array(store, path=n, mode="r+")
        array.resize(plan.full[n].shape)  # metadata only: growing deletes no chunk
        planned[n] = open_array(store, path=n, mode="r")
    reports, graph_seconds = write_units(job, plan, old, _Session(store), planned, job_id, measure=_measure(store))
    notes.append(appended_note(plan, ref.text))
    ic = icc.require()
    try:
        snapshot = session.commit(f"zopt append: {src.text}", metadata={"zopt": {"append": src.text,
                                                                                 "files": len(src.files)}})
    except ic.ConflictError as exc:
        raise icc.BranchMovedError(f"dst: branch {ref.branch!r} of {ref.text} moved during the append (another "
                                   "commit, or another append); nothing was committed: run it again") from exc
    notes.append(Note(f"committed snapshot {snapshot} on {ref.text}", "append"))
    for rep in reports.values():
        rep.seconds = time.perf_counter() - t0
    return RecompressReport(dst=ref.text, arrays=list(reports.values()), seconds=time.perf_counter() - t0,
                            source_bytes=src.total_bytes(), graph_seconds=graph_seconds, notes=notes, job=job)
