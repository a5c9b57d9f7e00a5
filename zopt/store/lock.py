"""One writing job per store: a lock file with the owner's pid and host, and the job's
temporary directory.

``zopt compact`` and ``recompress --in-place`` replace the shard files of an existing store.
Two such jobs on one store at once would race on the same shards (and each would treat the
other's temporary files as leftovers), so each takes ``<store>/.zopt-lock`` first, holding JSON
``{"pid", "host", "job", "since"}``, and keeps an exclusive ``flock`` on it while it runs.
``recompress SRC DST`` into a local directory takes the same lock beside the store it creates,
``DST.zopt-lock`` (``destination_lock``): DST does not exist yet, and two jobs sharing
``DST.zopt-partial`` would publish each other's half-written stores.

- A new lock is created complete: the record is written to a unique temporary file, flocked,
  and hard-linked to ``.zopt-lock`` (atomic, fails if it exists), so no job sees a new lock empty.
- A job finding the file tries its ``flock`` without waiting. Held: a live job owns the store,
  ``StoreLockedError`` names it. Taken: the job checks that the file it locked is still the one
  at ``.zopt-lock`` (a releasing job unlinks it before closing), then reads the record. A record
  naming a process of this host that no longer exists is stale, and so is an empty or garbage
  file older than ``STALE_GRACE`` seconds (a crash between create and write); the job then
  rewrites the record in place. The ``flock`` makes the takeover exclusive: only one job can hold
  it, so of N jobs racing for a stale lock exactly one wins (``tests/store/test_lock.py``: 8 processes x
  500 rounds). A lock from another host is refused (its pid cannot be checked); the message says
  which file to remove if that job is gone.
- ``flock`` keeps that promise on local filesystems and on NFS where the client forwards locks
  to the server (Linux NFS does, unless mounted ``nolock`` or ``local_lock=flock``). Where the
  filesystem refuses ``flock`` (ENOLCK), the takeover renames the stale lock aside under a unique
  name and re-reads it, putting it back if it is not the stale lock it read: this narrows the
  race, it does not close it. Object stores are never locked: rewrites take local directories.

While it holds the lock a job keeps its temporary files in ``<store>/.zopt-jobs/<job>/``
(``job_dir``) and, on start, removes what dead jobs left: other job directories and the
``*.zopt-packed-*`` / ``*.zopt-slots-*`` / ``*.zopt-tmp-*`` files next to the shards (older zopt
versions; ``zopt.store.files.temp_path``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeGuard

from zopt.errors import ZoptError

__all__ = ["DST_LOCK_SUFFIX", "LOCK_NAME", "JOBS_DIR", "STALE_GRACE", "DestinationError", "StoreLockedError",
           "destination_lock", "running_on_this_host", "store_lock"]

LOCK_NAME = ".zopt-lock"
#: a new store ``DST`` is written by one job at a time: the lock beside it, ``DST.zopt-lock``
DST_LOCK_SUFFIX = ".zopt-lock"
JOBS_DIR = ".zopt-jobs"
#: seconds after which an empty or garbage lock file is stale (its writer died before writing)
STALE_GRACE = 10.0
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV}
#: leftovers next to shard files written by interrupted jobs of earlier zopt versions
_OLD_TEMP_MARKS = (".zopt-packed-", ".zopt-slots-", ".zopt-tmp-")


class StoreLockedError(ZoptError, RuntimeError):
    """Another job holds the store's lock. ``owner``: the lock file's JSON as a dict (empty when
    the file holds none); ``lock``: the lock file's path."""

    def __init__(self, store: str, owner: dict[str, Any], lock: str, message: str | None = None,
                 subject: str | None = None) -> None:
        self.owner = owner
        self.lock = lock
        if message is None:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("since", 0)))
            who = (f"by pid {owner.get('pid')} on host {owner.get('host')!r} (job {owner.get('job')}, since {since})"
                   if subject is None else f"(pid {owner.get('pid')} on host {owner.get('host')!r}, since {since})")
            message = (f"{subject or f'store {store!r} is being rewritten'} {who}; wait for it to finish, or remove "
                       f"{lock} if that job is gone")
        super().__init__(message)


class DestinationError(ZoptError, OSError):
    """A new destination cannot be created where it was asked for (its parent directory is missing,
    not a directory, read-only or not writable by this user). The message names DST and why; ``errno`` is the
    failure's."""

    def __str__(self) -> str:
        return str(self.strerror)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def running_on_this_host(owner: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """Whether ``owner`` (a record with ``pid`` and ``host``: a lock's, a store's unfinished marker, an
    Icechunk job's commit) names a process of this host that still runs. Another host's cannot be
    checked: False."""
    if not isinstance(owner, dict) or owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return False
    return _alive(owner["pid"])


def _parse_owner(raw: bytes) -> dict[str, Any] | None:
    """The lock's owner, or None when ``raw`` is empty or not an owner record (garbage)."""
    try:
        owner = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or not isinstance(owner.get("host"), str):
        return None
    return owner


def _is_stale(owner: dict[str, Any] | None, age: float) -> bool:
    if owner is None:  # empty (a crash between create and write) or garbage
        return age > STALE_GRACE
    return owner["host"] == socket.gethostname() and not _alive(owner["pid"])


def _refusal(store: Path, lock: Path, raw: bytes, age: float, subject: str | None = None) -> StoreLockedError:
    owner = _parse_owner(raw)
    if owner is not None:
        return StoreLockedError(os.fspath(store), owner, os.fspath(lock), subject=subject)
    what = "is empty" if not raw.strip() else "does not hold an owner record (pid, host)"
    return StoreLockedError(
        os.fspath(store), {}, os.fspath(lock),
        f"lock file {lock} {what}, written {age:.0f} s ago: another job may be creating it. It is "
        f"treated as stale once older than {STALE_GRACE:g} s; run again then, or remove {lock} if no job runs",
    )


def _flock(fd: int) -> bool | None:
    """Try an exclusive ``flock`` without waiting: True taken, False held by another open file,
    None when the filesystem has no such locks."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in _NO_LOCKS:
            return None
        raise
    return True


def _read_fd(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _create(lock: Path, record: bytes) -> int | None:
    """Create ``lock`` holding ``record`` in one step (a hard link of a complete, flocked
    temporary file), so that no job ever sees a new lock empty. Returns its fd, or None when the
    lock exists."""
    tmp = lock.with_name(f"{lock.name}.new-{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, record)
        _flock(fd)  # held before the lock is visible (None: no flock here, nothing to hold)
        try:
            os.link(tmp, lock)
        except FileExistsError:
            os.close(fd)
            return None
        except OSError as e:  # no hard links here: O_EXCL creation, then write
            if e.errno not in _NO_LINKS:
                raise
            os.close(fd)
            return _create_excl(lock, record)
        return fd
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    finally:
        tmp.unlink(missing_ok=True)


def _create_excl(lock: Path, record: bytes) -> int | None:
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return None
    _flock(fd)
    os.write(fd, record)
    return fd


def _acquire(store: Path, job_id: str, lock: Path | None = None, subject: str | None = None) -> tuple[Path, int]:
    """Take ``store/.zopt-lock`` (or ``lock``); returns it and the open, ``flock``-ed file descriptor
    that holds it (closed on release). See the module docstring for why only one job can win a
    takeover. ``subject`` words a refusal (default: the store is being rewritten)."""
    lock = store / LOCK_NAME if lock is None else lock
    me = {"pid": os.getpid(), "host": socket.gethostname(), "job": job_id, "since": time.time()}
    record = json.dumps(me).encode()
    for _ in range(20):
        fd = _create(lock, record)
        if fd is not None:
            return lock, fd
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:  # released meanwhile
            continue
        try:
            got = _flock(fd)
            if got is None:
                os.close(fd)
                _take_over_without_flock(store, lock, subject)
                continue
            raw = _read_fd(fd)
            age = time.time() - os.fstat(fd).st_mtime
            if not got:  # a live job holds it
                raw = _owner_record(fd, raw)
                raise _refusal(store, lock, raw, age, subject)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(lock))
            except FileNotFoundError:
                same = False
            if not same:  # released (and maybe re-created) between our open and our flock
                os.close(fd)
                continue
            if not _is_stale(_parse_owner(raw), age):
                raise _refusal(store, lock, raw, age, subject)
            # The stale lock is ours: we hold its flock, so any other job taking it over waits
            # for us and then finds it live (or removed). Rewrite it in place.
            os.pwrite(fd, record, 0)  # never empty meanwhile: the record first, then its end
            os.ftruncate(fd, len(record))
            return lock, fd
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
    raise StoreLockedError(os.fspath(store), _parse_owner(_read(lock)) or {}, os.fspath(lock), subject=subject)


def _owner_record(fd: int, raw: bytes, wait: float = 1.0) -> bytes:
    """The live holder's record: a job taking over a stale lock rewrites it in place while it holds
    the ``flock``, so a reader may catch it mid-write; read again for up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while _parse_owner(raw) is None and time.monotonic() < deadline:
        time.sleep(0.02)
        raw = _read_fd(fd)
    return raw


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _take_over_without_flock(store: Path, lock: Path, subject: str | None = None) -> None:
    """Where the filesystem has no ``flock``: rename a stale lock aside under a unique name, then
    re-read what was renamed; if it is not the stale lock read first (another job took over and
    created its own meanwhile), put it back and refuse. Narrows the race, does not close it."""
    raw = _read(lock)
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return
    if not _is_stale(_parse_owner(raw), age):
        raise _refusal(store, lock, raw, age, subject)
    aside = lock.with_name(f"{lock.name}.stale-{uuid.uuid4().hex}")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:  # another job took it over first
        return
    got = aside.read_bytes()
    if got != raw:
        with contextlib.suppress(FileExistsError):
            os.link(aside, lock)
        aside.unlink()
        raise _refusal(store, lock, got, 0.0, subject)
    aside.unlink()


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
def store_lock(store: str | os.PathLike[str], job_id: str) -> Iterator[Path]:
    """Hold ``<store>/.zopt-lock`` for job ``job_id`` and yield the job's temporary directory
    ``<store>/.zopt-jobs/<job>`` (created; removed with the lock on exit).

    On entry, dead jobs' leftovers are removed (see the module docstring).
    Raises StoreLockedError naming the owner when another live job holds the lock.
    """
    root = Path(os.fspath(store))
    lock, fd = _acquire(root, job_id)
    tmp = root / JOBS_DIR / job_id
    try:
        _remove_leftovers(root, job_id)
        tmp.mkdir(parents=True, exist_ok=True)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            (root / JOBS_DIR).rmdir()  # only when empty
        try:
            lock.unlink(missing_ok=True)  # while still holding its flock: see _acquire
        finally:
            os.close(fd)


def _cannot_create(dst: str, parent: Path, exc: OSError) -> str:
    """Why a new store cannot be created at ``dst``, in words."""
    if exc.errno == errno.ENOENT and not parent.exists():
        why = f"its parent directory {os.fspath(parent)!r} does not exist"
    elif exc.errno == errno.ENOTDIR or (exc.errno == errno.ENOENT and not parent.is_dir()):
        why = f"{os.fspath(parent)!r} (or a directory above it) is not a directory"
    elif exc.errno == errno.EROFS:
        why = f"{os.fspath(parent)!r} is on a read-only file system"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why = f"permission denied writing in {os.fspath(parent)!r}"
    else:
        why = f"{exc.strerror or exc} ({exc.filename or os.fspath(parent)})"
    return f"cannot create dst {dst!r}: {why}; nothing was written"


@contextlib.contextmanager
def destination_lock(dst: str | os.PathLike[str], job_id: str) -> Iterator[Path]:
    """Hold ``DST.zopt-lock`` (beside ``dst``, in its parent directory) while job ``job_id`` creates,
    resumes or replaces the store ``dst``; yields the lock's path, removed on exit.

    Taken before anything of ``dst`` is created (its partial store, its aside copy): a second job on
    the same ``dst`` is refused with ``StoreLockedError`` naming the holder, and nothing is written.
    The lock is the one ``store_lock`` takes (a record of pid and host, an ``flock`` held while the
    job runs), so a killed job's lock is stale and the next job takes it over. Raises
    ``DestinationError`` (one line naming ``dst`` and why) when the lock cannot be created there: a
    parent directory missing, not a directory, read-only or not writable.
    """
    text = os.fspath(dst).rstrip(os.sep)
    path = Path(text)
    lock = path.with_name(path.name + DST_LOCK_SUFFIX)
    try:
        lock, fd = _acquire(path.parent, job_id, lock, f"dst {text!r} is being written by another zopt job")
    except StoreLockedError:
        raise
    except OSError as exc:
        raise DestinationError(exc.errno, _cannot_create(text, path.parent, exc)) from exc  # errno: a full disk stays one
    try:
        yield lock
    finally:
        try:
            lock.unlink(missing_ok=True)  # while still holding its flock: see _acquire
        finally:
            os.close(fd)
