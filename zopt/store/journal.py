"""The journal of a recompress job: what it will do, and what it has done, inside its partial store.

A job writing ``DST`` works in ``DST.zopt-partial`` (``zopt.io.paths``). Its journal is the
directory ``DST.zopt-partial/.zopt-journal``:

- ``job.json``: the plan of work's *fingerprint* (zopt version, source identity, the options
  that change the output), the job id that names its temporary files, and each rewritten
  array's ``(inner chunks, shard)`` shapes. Written once, after the target's metadata and every
  copied (not rewritten) array are in place: a partial store without it is started over.
- ``done/<array>/<c0.c1…>``: one marker per finished write unit (a shard; a chunk of an
  unsharded array), holding the unit's ``(masks, chunks written)`` for the report. A marker is
  written by the task itself, by an atomic rename, only *after* its shard was renamed into
  place; a shard without a marker — never started, half written, torn by a kill mid-write — is
  simply written again (every write replaces the whole shard, atomically).

Re-running the same command finds the journal, compares fingerprints (``ResumeMismatchError``
naming what differs, before anything is touched), skips the marked units and publishes as
usual. The journal is removed just before the publishing rename, so ``DST`` never holds it.

What the source identity covers: the metadata documents of the source's root and of every
rewritten array (``zarr.json``, ``.zarray``, ``.zattrs``, ``.zgroup``, ``.zmetadata``), and
the size, modification time and a sample of the bytes of a netCDF/HDF5 file
(``zopt.store.identity``: an edit in place outside the sampled ranges, with size and mtime put
back, is not detected). A Zarr chunk rewritten in place without touching any metadata is not
detected (listing every chunk of a large store would cost what resuming saves).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import pickle
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from zopt.errors import ZoptError
from zopt.store.files import TMP_MARK, atomic_write
from zopt.store.identity import changed_files, file_identity

__all__ = ["IN_PLACE_DIR", "JOURNAL_DIR", "InPlaceJournal", "Journal", "ResumeMismatchError", "fingerprint", "mark",
           "source_identity"]

JOURNAL_DIR = ".zopt-journal"
_FORMAT = 1
_METADATA = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")


class ResumeMismatchError(ZoptError, ValueError):
    """A partial store left by an earlier job was made from another source or with other
    options; the message names what differs and how to start over."""


def _decision_text(decision: object) -> str:
    if isinstance(decision, str):
        return decision
    text = repr(decision)
    if " at 0x" in text or " object at " in text:  # no stable repr: its qualified name
        return f"{getattr(decision, '__module__', '?')}.{getattr(decision, '__qualname__', type(decision).__qualname__)}"
    return text


def _read_bytes(url: str) -> bytes | None:
    """The bytes at a local path or fsspec URL, None if absent."""
    try:
        if "://" in url and not url.startswith("file://"):
            import fsspec

            with fsspec.open(url, "rb") as f:
                data: bytes = f.read()
                return data
        with open(url.removeprefix("file://"), "rb") as f:
            return f.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def source_identity(src: str, names: Iterable[str]) -> str:
    """A digest of what identifies ``src`` for a job rewriting arrays ``names`` (see the module doc).

    src : a local path or an fsspec URL. Returns a hex string."""
    h = hashlib.blake2b(digest_size=16)
    local = src.removeprefix("file://") if "://" not in src or src.startswith("file://") else None
    if local is not None and os.path.isfile(local):
        h.update(f"file {file_identity(local)}".encode())  # size, mtime and a sample of the bytes
        return h.hexdigest()
    base = src.rstrip("/")
    for prefix in ["", *sorted(n for n in names if n)]:
        for doc in _METADATA:
            key = "/".join(p for p in (prefix, doc) if p)
            data = _read_bytes(f"{base}/{key}")
            if data is not None:
                h.update(key.encode() + b"\0" + hashlib.blake2b(data, digest_size=16).digest())
    return h.hexdigest()


def fingerprint(src: str, names: Iterable[str], options: dict[str, Any], identity: str | None = None,
                files: str | None = None) -> dict[str, Any]:
    """The fingerprint of a job's plan of work: a JSON-able dict compared key by key on resume.

    options : the options that change the output (chain, chunks, shards, decision, variables,
    layout, slot parts, plan); values are turned into stable text here. identity : the source's
    identity when the caller has it (several files combined: every file's), else ``source_identity``.
    files : several files' identities (``zopt.store.identity.files_table``), kept so that a refused
    resume names the files that changed (not compared itself: ``identity`` covers them)."""
    from zopt._version import __version__

    text = {}
    for key, value in options.items():
        if key == "decision":
            text[key] = _decision_text(value)
        elif key == "plan" and value is not None and not isinstance(value, str | os.PathLike):
            text[key] = hashlib.blake2b(pickle.dumps(value), digest_size=16).hexdigest()
        elif isinstance(value, str) or value is None:
            text[key] = "unset" if value is None else value
        else:
            text[key] = json.dumps(value, sort_keys=True, default=str)
    out = {"zopt": __version__, "source": src, "source identity": identity or source_identity(src, names),
           "options": text}
    if files is not None:
        out["source files"] = files
    return out


def _source_changed(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Which source changed, in words: the files of several (from their tables), else the source."""
    if "source files" in old and "source files" in new:
        which = changed_files(old["source files"], new["source files"])
        if which is not None:
            return f"the source changed ({which})"
    return f"the source changed ({new['source']})"


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` by a rename: a reader finds all of it or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # fsync: after a machine crash the record is whole or absent, never an empty file (a rename
    # without it can leave one); a few small files per shard, so cheap
    atomic_write(path, data, fsync=True)


def _unit_key(coords: Iterable[int]) -> str:
    return ".".join(map(str, coords)) or "0"


def _array_dir(name: str) -> str:
    return name or "@root"  # a root array has the empty name


def mark(marker: str, masks: collections.Counter[int], written: int) -> None:
    """Record one finished write unit at path ``marker`` (called by the write task after its
    shard is in place). Idempotent: a retried task writes the same marker again."""
    _write_atomic(Path(marker), json.dumps({"masks": {str(k): v for k, v in masks.items()}, "written": written}).encode())


class Journal:
    """The journal directory of the partial store ``partial`` (a local directory path)."""

    def __init__(self, partial: str | os.PathLike[str]) -> None:
        self.partial = Path(partial)
        self.dir = self.partial / JOURNAL_DIR

    def read(self) -> dict[str, Any] | None:
        """``job.json`` as a dict, or None when there is no complete one."""
        try:
            record = json.loads((self.dir / "job.json").read_text())
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        return record if record.get("format") == _FORMAT else None

    def check(self, record: dict[str, Any], fp: dict[str, Any], dst: str) -> None:
        """ResumeMismatchError unless ``record`` (from ``read``) was written for fingerprint ``fp``."""
        old = record["fingerprint"]
        differs = [k for k in ("zopt", "source", "source identity") if old.get(k) != fp[k]]
        differs += [k for k in sorted(set(old["options"]) | set(fp["options"])) if old["options"].get(k) != fp["options"].get(k)]
        if not differs:
            return
        what = ", ".join(_source_changed(old, fp) if k == "source identity" else
                         f"zopt version {old.get('zopt')} → {fp['zopt']}" if k == "zopt" else
                         f"{k}: {old['options'].get(k, 'unset') if k in old['options'] else old.get(k)} → "
                         f"{fp['options'].get(k, 'unset') if k in fp['options'] else fp.get(k)}"
                         for k in differs)
        raise ResumeMismatchError(
            f"resume: {str(self.partial)!r} holds an interrupted job for {dst!r} made with other inputs ({what}); "
            f"re-run with the original options to resume, or delete {str(self.partial)!r} to start over"
        )

    def begin(self, fp: dict[str, Any], job_id: str, layouts: dict[str, Any]) -> None:
        """Record the plan of work; call once the target's metadata and copied arrays are in place."""
        record = {"format": _FORMAT, "fingerprint": fp, "job": job_id,
                  "layouts": {n: [list(i), None if s is None else list(s)] for n, (i, s) in layouts.items()}}
        _write_atomic(self.dir / "job.json", json.dumps(record, indent=1).encode())

    @staticmethod
    def layouts(record: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]]:
        return {n: (tuple(i), None if s is None else tuple(s)) for n, (i, s) in record["layouts"].items()}

    def marker(self, name: str, coords: Iterable[int]) -> str:
        """The marker path of write unit ``coords`` (shard or chunk grid coordinates) of array ``name``."""
        return str(self.dir / "done" / _array_dir(name) / _unit_key(coords))

    def done(self, name: str) -> dict[str, tuple[collections.Counter[int], int]]:
        """``{unit key: (masks, chunks written)}`` of array ``name``'s finished units (unreadable markers left out)."""
        found = {}
        folder = self.dir / "done" / _array_dir(name)
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(folder):
                if entry.name.startswith("."):
                    continue  # a marker being written
                try:
                    record = json.loads(Path(entry.path).read_bytes())
                    found[entry.name] = (collections.Counter({int(k): v for k, v in record["masks"].items()}),
                                         int(record["written"]))
                except (ValueError, KeyError, TypeError, OSError):
                    continue  # unreadable: its unit is redone
        return found

    @staticmethod
    def key(coords: Iterable[int]) -> str:
        return _unit_key(coords)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


#: zarr-python's LocalStore writes ``<key with its suffix replaced>.<uuid4 hex>.partial`` and renames it
#: into place (zarr 3.1 to 3.4, ``zarr.storage._local._atomic_write``); a killed job leaves it behind
_ZARR_TEMP = re.compile(r".*\.[0-9a-f]{32}\.partial")


def remove_temporaries(partial: str | os.PathLike[str]) -> int:
    """Delete the temporary files a killed job left in ``partial`` (its own, with
    ``zopt.store.files.TMP_MARK`` in the name, and zarr-python's LocalStore ones,
    ``<name>.<uuid hex>.partial``); returns how many. They are never part of the store: every shard
    and chunk is renamed into place, and the whole partial store is the job's own."""
    n = 0
    for root, dirs, files in os.walk(partial):
        dirs[:] = [d for d in dirs if d != JOURNAL_DIR]
        for f in files:
            if TMP_MARK in f or _ZARR_TEMP.fullmatch(f):
                Path(root, f).unlink(missing_ok=True)
                n += 1
    return n


def keeps_partial(exc: BaseException) -> bool:
    """Whether a job failing with ``exc`` keeps its partial store for a resume: interruptions and
    infrastructure failures (Ctrl-C, a lost worker, I/O errors such as a full disk or a dropped
    connection, memory), not errors about the job's inputs."""
    if isinstance(exc, KeyboardInterrupt | SystemExit | MemoryError):
        return True
    if isinstance(exc, OSError) and not isinstance(exc, FileExistsError | FileNotFoundError | PermissionError):
        return True
    return type(exc).__name__ in ("KilledWorker", "CommClosedError", "CancelledError", "FutureCancelledError")


# -- in-place rewrites (``recompress --in-place``) ---------------------------------------------

IN_PLACE_DIR = ".zopt-in-place"


class InPlaceJournal:
    """What an interrupted ``recompress --in-place`` of a store finished, so the same job resumes.

    Lives in ``<store>/.zopt-in-place/`` (outside ``.zopt-jobs``, whose per-job directories the
    store lock removes when a job starts): ``done/<array>/<c0.c1…>``, one marker per rewritten
    shard (or chunk file of an unsharded array), written atomically by the task after the file
    was renamed into place. A marker holds the job's fingerprint (a digest of the zopt version,
    the metadata documents of the store and of every array rewritten — codecs included —, the
    decision or plan and the arrays), the file's ``(size, mtime_ns, inode)`` after the rename,
    and the unit's ``(masks, chunks written)`` for the report.

    A run with the same fingerprint skips a unit whose marker matches its file as it is now;
    any other unit — never reached, killed mid-write, touched since (``zopt compact``, phase B
    of an earlier run), or marked by a job with another fingerprint — is rewritten, which is
    always correct (the rewrite is idempotent). Nothing is written before the first unit is
    done, and the directory is removed when a run completes.
    """

    def __init__(self, store: str | os.PathLike[str], job_id: str) -> None:
        self.dir = Path(store) / IN_PLACE_DIR
        self.job_id = job_id

    @classmethod
    def start(cls, store: str, names: Iterable[str], decision: object, plan: object) -> InPlaceJournal:
        """The journal of an in-place job on ``store`` rewriting arrays ``names`` (the caller holds its lock)."""
        names = sorted(names)
        fp = fingerprint(store, names, {"mode": "in-place", "decision": decision, "plan": plan, "variables": names})
        return cls(store, hashlib.blake2b(json.dumps(fp, sort_keys=True).encode(), digest_size=16).hexdigest())

    def marker(self, name: str, coords: Iterable[int]) -> str:
        """The marker path of unit ``coords`` (shard or chunk grid coordinates) of array ``name``."""
        return str(self.dir / "done" / _array_dir(name) / _unit_key(coords))

    def done(self, name: str) -> dict[str, tuple[collections.Counter[int], int]]:
        """``{unit key: (masks, chunks written)}`` of array ``name``'s units marked by this job
        whose marker matches the unit's file as it is now (see the class docstring)."""
        found = {}
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.dir / "done" / _array_dir(name)):
                if entry.name.startswith("."):
                    continue
                try:
                    record = json.loads(Path(entry.path).read_bytes())
                    if record["job"] != self.job_id:
                        continue  # another job's (other options, other zopt): redone
                    st = os.stat(record["file"])
                    if [st.st_size, st.st_mtime_ns, st.st_ino] != record["stat"]:
                        continue  # changed since: rewritten again
                    found[entry.name] = (collections.Counter({int(k): v for k, v in record["masks"].items()}),
                                         int(record["written"]))
                except (ValueError, KeyError, TypeError, OSError):
                    continue  # unreadable, or the file is gone: its unit is not skipped
        return found

    def task(self, write: Callable[..., tuple[collections.Counter[int], int]], path: str, marker: str,
             *args: object) -> tuple[collections.Counter[int], int]:
        """Dask task: ``write(*args)`` (returning ``(masks, chunks written)``), then the marker
        of ``path`` as the rewrite left it. A file removed (all fill value) gets no marker: a
        later run finds no file and has nothing to do."""
        masks, written = write(*args)
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(path)
            _write_atomic(Path(marker), json.dumps({
                "job": self.job_id, "file": path, "stat": [st.st_size, st.st_mtime_ns, st.st_ino],
                "masks": {str(k): v for k, v in masks.items()}, "written": written}).encode())
        return masks, written

    def remove(self) -> None:
        """Remove the journal (only its own directory)."""
        shutil.rmtree(self.dir, ignore_errors=True)
