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
from typing import Any

from zopt.errors import ZoptError

__all__ = ["UNFINISHED_KEY", "UnfinishedStoreError", "check_finished", "describe_unfinished", "mark_unfinished",
           "read_unfinished", "remove_unfinished"]

UNFINISHED_KEY = "zopt-unfinished.json"


class UnfinishedStoreError(ZoptError, ValueError):
    """A store whose ``zopt recompress`` was killed before it finished (it holds ``UNFINISHED_KEY``)."""


def _sync(coro: Any) -> Any:
    from zarr.core.sync import sync

    return sync(coro)


def mark_unfinished(store: Any, job: str, src: str) -> None:
    """Put the marker at the root of zarr Store ``store`` for job ``job`` reading ``src``."""
    from zarr.core.buffer import default_buffer_prototype

    record = {"job": job, "src": src, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "host": socket.gethostname(), "pid": os.getpid()}
    _sync(store.set(UNFINISHED_KEY, default_buffer_prototype().buffer.from_bytes(json.dumps(record).encode())))


def remove_unfinished(store: Any) -> None:
    """Delete the marker: the job's last write."""
    _sync(store.delete(UNFINISHED_KEY))


def read_unfinished(store: Any) -> dict[str, Any] | None:
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


def check_finished(location: Any) -> None:
    """Raise ``UnfinishedStoreError`` (one line, ``describe_unfinished``) when the store at
    ``location`` (a local path, an fsspec URL or a zarr Store) holds the marker."""
    from zarr.abc.store import Store

    where = str(location)
    store = location
    if not isinstance(location, Store):
        text = os.fspath(location)
        store = text.removeprefix("file://")
        if "://" in store:
            import zarr

            store = zarr.storage.FsspecStore.from_url(text, read_only=True)
    else:
        from zopt.io.paths import store_text

        where = store_text(location)
    record = read_unfinished(store)
    if record is not None:
        raise UnfinishedStoreError(describe_unfinished(where, record))
