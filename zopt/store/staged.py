"""Files written beside a local store, then installed into it so that its readers never see a torn state.

An append (``zopt.job.append``) writes every new or rewritten chunk file (a shard, or a chunk of an
unsharded array) and every changed metadata document into a staging directory ``DST.zopt-append``,
laid out as the store is (``<array>/c/…``, ``<array>/zarr.json``, ``zarr.json``), with its journal
(``zopt.store.journal``) in ``.zopt-journal``. ``install`` then moves them into the store, each by
one ``os.replace`` (atomic on one filesystem), in the order that keeps every state a reader can meet
consistent:

1. the chunk files beyond the store's old shape (readers of the old metadata never ask for them);
2. the chunk files that replace the old, partly filled ones (a reader finds the old file or the new
   one whole; the new one holds the old rows unchanged, so readers of the old shape read the same
   values from it);
3. each array's ``zarr.json`` (its new shape: every chunk it names is in place);
4. the root ``zarr.json`` last (its consolidated metadata: readers of it switch all arrays at once).

Before the first move the journal records ``installing``: a process killed during the install leaves
a store whose readers see the old or the new arrays, and the next ``install`` of the same staging
directory (``installing`` true) finishes the moves (a moved file is no longer staged) and removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from zopt.store.files import atomic_write
from zopt.store.journal import JOURNAL_DIR

__all__ = ["INSTALLING", "STAGING_SUFFIX", "install", "installing", "stage_document", "staged_chunks"]

STAGING_SUFFIX = ".zopt-append"
#: the journal's record that the install began: the moves are finished by the next run
INSTALLING = "installing.json"


def stage_document(staging: str, key: str, doc: dict[str, object]) -> None:
    """Write the metadata document ``doc`` at ``key`` (``zarr.json``, ``<array>/zarr.json``) of the staging directory."""
    path = Path(staging, *key.split("/"))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(doc, indent=2).encode(), fsync=False)


def installing(staging: str) -> bool:
    """Whether an install of ``staging`` began (and has not finished)."""
    return Path(staging, JOURNAL_DIR, INSTALLING).exists()


def staged_chunks(staging: str, name: str) -> Iterator[tuple[str, str]]:
    """``(path, key relative to the array)`` of every chunk file of array ``name`` staged (its
    journal and temporary files left out)."""
    base = os.path.join(staging, name)
    for root, dirs, files in os.walk(base):
        dirs.sort()
        for f in sorted(files):
            if f == "zarr.json" or f.startswith("."):
                continue
            path = os.path.join(root, f)
            yield path, os.path.relpath(path, base)


def _move(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.replace(src, dst)


def install(staging: str, dst: str, arrays: list[str], rewrites: Callable[[str, str], bool]) -> int:
    """Move the staged files of ``arrays`` into the store ``dst`` in the order of the module
    docstring, then remove ``staging``; returns the chunk files moved. ``rewrites(name, key)``:
    whether chunk ``key`` of array ``name`` replaces a file of the old shape (moved second).
    Idempotent: a run killed at any point is finished by calling it again."""
    journal = Path(staging, JOURNAL_DIR)
    if not installing(staging):
        atomic_write(journal / INSTALLING, json.dumps({"arrays": arrays}).encode(), fsync=True)
    moved = 0
    for second in (False, True):
        for name in arrays:
            for path, key in list(staged_chunks(staging, name)):
                if rewrites(name, key) == second:
                    _move(path, os.path.join(dst, name, key))
                    moved += 1
    for name in arrays:
        with contextlib.suppress(FileNotFoundError):
            os.replace(os.path.join(staging, name, "zarr.json"), os.path.join(dst, name, "zarr.json"))
    with contextlib.suppress(FileNotFoundError):
        os.replace(os.path.join(staging, "zarr.json"), os.path.join(dst, "zarr.json"))
    shutil.rmtree(staging, ignore_errors=True)
    return moved
