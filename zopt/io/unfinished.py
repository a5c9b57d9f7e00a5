"""The "unfinished job" marker of store destinations (``s3://…``, ``file://…``, any zarr Store).

A local directory DST is written under ``DST.zopt-partial`` and renamed into place, so a killed
job never leaves a DST that looks finished. A Store has no rename: ``zopt recompress`` writes
it in place. So, before the target's first key (its root ``zarr.json``), the job puts
``UNFINISHED_KEY`` at the store's root (the job id, its start time, host and pid, and SRC) and deletes it as the last
step of a successful job; a failed job clears the whole store. A job killed in between leaves
the marker: zarr readers still open the store (its missing shards read as fill values), but
``zopt verify`` refuses it and ``zopt info`` says so, both naming the marker
(``describe_unfinished``). Run the same recompress again with ``--overwrite``: it clears the
store and starts over.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from zopt.errors import ZoptError

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from zarr.abc.store import Store

__all__ = ["UNFINISHED_KEY", "StoreTakenOverError", "UnfinishedStoreError", "check_finished", "check_not_running",
           "describe_unfinished", "done_writing", "mark_unfinished", "owns", "read_unfinished", "remove_unfinished",
           "taken_over_by"]

UNFINISHED_KEY = "zopt-unfinished.json"


class UnfinishedStoreError(ZoptError, ValueError):
    """A store whose ``zopt recompress`` was killed before it finished (it holds ``UNFINISHED_KEY``)."""


class StoreTakenOverError(ZoptError, RuntimeError):
    """Another job cleared the store this job was writing (its marker replaced, or removed by that
    job's publish): this job's output was not published, and the store is left to the other job."""


def _sync(coro: Coroutine[Any, Any, Any]) -> Any:
    from zarr.core.sync import sync

    return sync(coro)


#: the jobs of this process writing a store now (a marker naming this process but no job here is stale)
_WRITING: set[str] = set()


def mark_unfinished(store: Store, job_id: str, src: str, yielded: bool = False) -> None:
    """Put the marker at the root of zarr Store ``store`` for job ``job_id`` reading ``src``; the job
    counts as writing (``check_not_running``) until ``done_writing(job)``. ``yielded``: the job put
    its marker and nothing else, then found another job writing the store, and leaves it to that
    job (whose ``remove_unfinished`` accepts such a marker)."""
    from zarr.core.buffer import default_buffer_prototype

    if not yielded:
        _WRITING.add(job_id)
    record = {"job": job_id, "src": src, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "host": socket.gethostname(), "pid": os.getpid(), **({"yielded": True} if yielded else {})}
    _sync(store.set(UNFINISHED_KEY, default_buffer_prototype().buffer.from_bytes(json.dumps(record).encode())))


def remove_unfinished(store: Store, job_id: str | None, where: str) -> None:
    """Delete the marker of job ``job_id`` (None: a job that yielded the store, whose marker is never
    its own): its last write. ``StoreTakenOverError`` (one line naming the
    store ``where`` and the other job) when the marker is not this job's: another job cleared the
    store meanwhile, so this job's writes may be gone."""
    taken = taken_over_by(store, job_id, where)
    if taken is not None:
        raise taken
    _sync(store.delete(UNFINISHED_KEY))


def taken_over_by(store: Store, job_id: str | None, where: str) -> StoreTakenOverError | None:
    """The ``StoreTakenOverError`` (one line naming the store ``where`` and the other job) when the
    marker in ``store`` is neither job ``job_id``'s nor yielded to it: another job cleared the store
    while this one wrote it. None while the store is still this job's."""
    record = read_unfinished(store)
    if owns(record, job_id) or (record or {}).get("yielded"):
        return None
    other = "its marker is gone (that job published)" if record is None else \
        "it holds " + ", ".join(f"{k} {record[k]}" for k in ("job", "started", "host", "pid") if k in record)
    return StoreTakenOverError(
        f"dst {where}: another zopt job cleared the store while this one (job {job_id}) was writing it: {other}; "
        "this job's output is not published and the store is left to that job: run one job at a time per store")


def done_writing(job_id: str | None) -> None:
    """Job ``job`` of this process has ended (published, failed or refused by ``before_publish``)."""
    _WRITING.discard(job_id)


def owns(record: dict[str, Any] | None, job_id: str | None) -> bool:
    """Whether the marker ``record`` (``read_unfinished``) is job ``job_id``'s."""
    return job_id is not None and record is not None and record.get("job") == job_id


def check_not_running(store: Store | str | os.PathLike[str], where: str) -> None:
    """Refuse (``StoreLockedError`` naming the job) to clear a store that a live job of this host is
    writing: its marker names a process that still runs. A marker from another host cannot be checked
    (the process is not visible): replacing that store with ``--overwrite`` makes that job fail at its end."""
    from zopt.store.lock import StoreLockedError, running_on_this_host

    record = read_unfinished(store)
    if not running_on_this_host(record):
        return  # none, a killed job's (replaced as usual), or another host's
    if record["pid"] == os.getpid() and record.get("job") not in _WRITING:
        return  # an earlier job of this process, ended (e.g. refused by before_publish)
    raise StoreLockedError(where, record, UNFINISHED_KEY,
                           message=f"dst {where} is being written by another zopt job (job {record.get('job')}, pid "
                                   f"{record['pid']} on host {record['host']!r}, started {record.get('started')}); "
                                   f"wait for it to finish, or delete {UNFINISHED_KEY} from it if that job is gone")


def read_unfinished(store: Store | str | os.PathLike[str]) -> dict[str, Any] | None:
    """The marker's record, or None when ``store`` (a zarr Store or a local directory path) has none."""
    if isinstance(store, str | os.PathLike):
        path = os.path.join(store, UNFINISHED_KEY)
        if not os.path.isfile(path):
            return None
        raw = open(path, "rb").read()  # noqa: SIM115 - one small read
    else:
        from zarr.core.buffer import default_buffer_prototype

        buf = _sync(store.get(UNFINISHED_KEY, prototype=default_buffer_prototype()))
        if buf is None:
            return None
        raw = buf.to_bytes()
    try:
        record = json.loads(raw)
    except ValueError:
        record = None
    return record if isinstance(record, dict) else {}


def describe_unfinished(where: str, record: dict[str, Any]) -> str:
    """One line naming the store, the marker and the job that left it."""
    who = ", ".join(f"{k} {record[k]}" for k in ("job", "started", "host", "pid") if k in record)
    return (f"unfinished job: {where} holds {UNFINISHED_KEY} ({who or 'unreadable record'}): the zopt recompress "
            "writing it was killed before it finished, so shards may be missing (they read as fill values); "
            "run the same recompress again with --overwrite, which clears the store and starts over")


def check_finished(location: str | os.PathLike[str] | Store) -> None:
    """Raise ``UnfinishedStoreError`` (one line, ``describe_unfinished``) when the store at
    ``location`` (a local path, an fsspec URL or a zarr Store) holds the marker."""
    from zarr.abc.store import Store

    store: str | Store
    if isinstance(location, Store):
        from zopt.io.paths import store_text

        store, where = location, store_text(location)
    else:
        where, text = str(location), os.fspath(location)
        store = text.removeprefix("file://")
        if "://" in store:
            import zarr

            store = zarr.storage.FsspecStore.from_url(text, read_only=True)
    record = read_unfinished(store)
    if record is not None:
        raise UnfinishedStoreError(describe_unfinished(where, record))
