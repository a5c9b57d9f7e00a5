"""One rewriting job per store: a lock file with the owner's pid and host, and the job's
temporary directory.

``zopt compact`` and ``recompress --in-place`` replace the shard files of an existing store.
Two such jobs on one store at once would race on the same shards (and each would treat the
other's temporary files as leftovers), so each takes ``<store>/.zopt-lock`` first: created
with ``O_CREAT | O_EXCL`` (atomic on a local filesystem), holding JSON
``{"pid", "host", "job", "since"}``. A second job finds the file and fails with
``StoreLockedError`` naming the owner. A lock whose owner is a process of this host that no
longer exists is stale: it is taken over (renamed aside atomically, so two jobs taking it
over at once cannot both win). A lock held from another host cannot be checked and is
refused; the message says which file to remove if that job is gone.

While it holds the lock a job keeps its temporary files in ``<store>/.zopt-jobs/<job>/``
(``job_dir``) and, on start, removes what dead jobs left: other job directories and the
``*.zopt-packed-*`` / ``*.zopt-slots-*`` files of older zopt versions next to the shards.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from zopt.errors import ZoptError

__all__ = ["LOCK_NAME", "JOBS_DIR", "StoreLockedError", "store_lock"]

LOCK_NAME = ".zopt-lock"
JOBS_DIR = ".zopt-jobs"
#: leftovers next to shard files written by interrupted jobs of earlier zopt versions
_OLD_TEMP_MARKS = (".zopt-packed-", ".zopt-slots-")


class StoreLockedError(ZoptError, RuntimeError):
    """Another job holds the store's lock. ``owner``: the lock file's JSON as a dict."""

    def __init__(self, store: str, owner: dict, lock: str) -> None:
        self.owner = owner
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("since", 0)))
        super().__init__(
            f"store {store!r} is being rewritten by pid {owner.get('pid')} on host {owner.get('host')!r} "
            f"(job {owner.get('job')}, since {since}); wait for it to finish, or remove {lock} if that job is gone"
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _read_owner(lock: Path) -> dict | None:
    try:
        return json.loads(lock.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        return {}  # being written, or garbage: treated as held


def _is_stale(owner: dict) -> bool:
    pid = owner.get("pid")
    return owner.get("host") == socket.gethostname() and isinstance(pid, int) and not _alive(pid)


def _acquire(store: Path, job: str) -> Path:
    lock = store / LOCK_NAME
    me = {"pid": os.getpid(), "host": socket.gethostname(), "job": job, "since": time.time()}
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            owner = _read_owner(lock)
            if owner is None:  # released meanwhile
                continue
            if not _is_stale(owner):
                raise StoreLockedError(os.fspath(store), owner, os.fspath(lock)) from None
            aside = lock.with_name(f"{LOCK_NAME}.stale-{uuid.uuid4().hex[:8]}")
            with contextlib.suppress(FileNotFoundError):  # another job took it over first
                os.rename(lock, aside)
                aside.unlink()
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        return lock
    raise StoreLockedError(os.fspath(store), _read_owner(lock) or {}, os.fspath(lock))


def _remove_leftovers(store: Path, keep: str) -> int:
    """Remove dead jobs' temporary files (the caller holds the lock). Returns how many."""
    n = 0
    jobs = store / JOBS_DIR
    if jobs.is_dir():
        for d in jobs.iterdir():
            if d.name != keep:
                n += sum(1 for p in d.rglob("*") if p.is_file())
                shutil.rmtree(d, ignore_errors=True)
    for dirpath, dirnames, filenames in os.walk(store):
        if JOBS_DIR in dirnames:
            dirnames.remove(JOBS_DIR)
        for name in filenames:
            if any(m in name for m in _OLD_TEMP_MARKS):
                Path(dirpath, name).unlink(missing_ok=True)
                n += 1
    return n


@contextlib.contextmanager
def store_lock(store: str | os.PathLike, job: str) -> Iterator[Path]:
    """Hold ``<store>/.zopt-lock`` for job ``job`` and yield the job's temporary directory
    ``<store>/.zopt-jobs/<job>`` (created; removed with the lock on exit).

    On entry, dead jobs' leftovers are removed (see the module docstring).
    Raises StoreLockedError naming the owner when another live job holds the lock.
    """
    root = Path(os.fspath(store))
    lock = _acquire(root, job)
    tmp = root / JOBS_DIR / job
    try:
        _remove_leftovers(root, job)
        tmp.mkdir(parents=True, exist_ok=True)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            (root / JOBS_DIR).rmdir()  # only when empty
        lock.unlink(missing_ok=True)
