"""Where a job reads and writes on the local file system: identity, overlap, atomic publish.

``recompress`` reads SRC and writes a new store at DST under ``DST.zopt-partial``; publishing
renames it into place. This module holds the rules that keep a user's data safe while doing so:

- paths are resolved on the client (``resolve``), so Dask workers in another working directory
  read and write the same files;
- SRC and DST (and DST's partial, aside and lock names) must not overlap in either direction
  (``check_no_overlap``): replacing DST would delete a source inside it, and writing into SRC
  would replace part of the source;
- an existing DST is replaced only if it is a Zarr hierarchy (``check_replaceable``), and by
  renaming it aside, publishing, then deleting the aside copy (``publish``), so a failure at
  any point leaves either the old or the new store complete; ``recover`` finishes or undoes
  what a job killed in between left behind.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

from zopt.errors import ZoptError
from zopt.store.lock import DST_LOCK_SUFFIX

if TYPE_CHECKING:
    from zarr.abc.store import Store

__all__ = [
    "ASIDE_SUFFIX",
    "NotAZarrStoreError",
    "OverlapError",
    "PARTIAL_SUFFIX",
    "check_no_overlap",
    "check_replaceable",
    "check_store_replaceable",
    "is_zarr_hierarchy",
    "publish",
    "recover",
    "resolve",
    "store_text",
]

#: the new store is written here, next to DST, and renamed to DST when complete
PARTIAL_SUFFIX = ".zopt-partial"
#: an existing DST is renamed here while the new store is published, then deleted
ASIDE_SUFFIX = ".zopt-replaced"
_ZARR_METADATA = ("zarr.json", ".zgroup", ".zarray", ".zmetadata")


class OverlapError(ZoptError, ValueError):
    """SRC and DST overlap: one is, or lies inside, the other."""


class NotAZarrStoreError(ZoptError, ValueError):
    """DST exists and is not a Zarr hierarchy, so zopt will not replace it."""


def resolve(path: str | os.PathLike[str]) -> str:
    """The absolute, symlink-free form of a local path (resolved in the caller's working
    directory, not a Dask worker's)."""
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_no_overlap(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Raise OverlapError if ``src`` and ``dst`` (or the partial, aside and lock paths next to
    ``dst``) are the same path or one contains the other. Nothing is written before this
    check."""
    s = resolve(src)
    d = resolve(dst)
    for target, what in ((d, "DST"), (d + PARTIAL_SUFFIX, "DST's partial store"), (d + ASIDE_SUFFIX, "DST's aside copy"),
                         (d + DST_LOCK_SUFFIX, "DST's lock")):
        if _inside(s, target):
            raise OverlapError(f"dst: SRC {os.fspath(src)!r} is inside {what} {target!r}; writing there would "
                               "delete or replace the source: choose a DST outside SRC")
        if _inside(target, s):
            raise OverlapError(f"dst: {what} {target!r} is inside SRC {os.fspath(src)!r}; writing there would "
                               "change the source: choose a DST outside SRC")


def is_zarr_hierarchy(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` is a directory holding Zarr metadata at its root (v2 or v3)."""
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, n)) for n in _ZARR_METADATA)


def check_replaceable(dst: str | os.PathLike[str], overwrite: bool, label: str = "dst") -> None:
    """Refuse an existing ``dst`` unless ``overwrite`` and it is a Zarr hierarchy (or an empty
    directory). Raises NotAZarrStoreError when it is anything else (a file, a link, a directory of
    other files: never replaced, overwrite or not), else FileExistsError (exists, no overwrite)."""
    dst = os.fspath(dst)
    if not os.path.lexists(dst):
        return
    if not (os.path.isdir(dst) and not os.path.islink(dst) and (is_zarr_hierarchy(dst) or not os.listdir(dst))):
        kind = ("a file" if os.path.isfile(dst) else "a symbolic link" if os.path.islink(dst)
                else "a directory that is not a Zarr hierarchy")
        raise NotAZarrStoreError(f"{label} {dst!r} is {kind}, not a Zarr store, and zopt replaces only a Zarr store: "
                                 "choose another path (or remove it yourself)")
    if not overwrite:
        raise FileExistsError(f"{label} {dst!r} exists; use --overwrite (overwrite=True) to replace it")


def recover(dst: str | os.PathLike[str]) -> str | None:
    """Finish or undo a publish that a killed job left half done. Returns what was done, or None.

    ``DST.zopt-replaced`` without ``DST``: the old store was renamed aside and the new one not
    yet published, so the old one is put back. With ``DST`` present, the new store was
    published and the aside copy is the old one, deleted."""
    dst = os.fspath(dst).rstrip(os.sep)
    aside = dst + ASIDE_SUFFIX
    if not os.path.isdir(aside):
        return None
    if os.path.lexists(dst):
        shutil.rmtree(aside)
        return f"removed {aside!r}, the previous store a killed job had replaced"
    os.replace(aside, dst)
    return f"restored {dst!r} from {aside!r}, left by a job killed while replacing it"


def publish(partial: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Rename the complete store ``partial`` to ``dst``. An existing ``dst`` is first renamed to
    ``dst + ASIDE_SUFFIX`` and deleted only after the new store is in place; if the publishing
    rename fails, the old store is put back. Every step is one rename on one file system."""
    partial, dst = os.fspath(partial), os.fspath(dst).rstrip(os.sep)
    aside = dst + ASIDE_SUFFIX
    if not os.path.lexists(dst):
        os.replace(partial, dst)
        return
    os.replace(dst, aside)
    try:
        os.replace(partial, dst)
    except BaseException:
        os.replace(aside, dst)
        raise
    shutil.rmtree(aside)


def check_store_replaceable(store: Store, overwrite: bool, text: str, zopt_keys: tuple[str, ...] = ()) -> bool:
    """The ``check_replaceable`` of a destination that is a zarr Store (an fsspec URL): refuse
    one holding anything unless ``overwrite``, and one holding keys but no Zarr metadata (nor one of
    ``zopt_keys``, e.g. a killed job's ``zopt.io.unfinished.UNFINISHED_KEY``) at its root even with
    ``overwrite`` (writing there clears every key under it). ``text`` names it. Returns whether the
    store holds anything (False: there is nothing to clear)."""
    from zarr.core.sync import sync

    async def first_key() -> str | None:
        async for key in store.list_prefix(""):
            return key
        return None

    key = sync(first_key())
    if key is None:
        return False
    if not overwrite:
        raise FileExistsError(f"dst {text} is not empty; use --overwrite (overwrite=True) to replace it")
    if not any(sync(store.exists(n)) for n in (*_ZARR_METADATA, *zopt_keys)):
        raise NotAZarrStoreError(f"dst {text} holds keys (e.g. {key!r}) but no Zarr hierarchy; --overwrite only "
                                 "replaces a Zarr store: choose another DST")
    return True


def store_text(store: object) -> str:
    """A store as a user names it: its URL (``memory://x.zarr``), else its repr."""
    path = getattr(store, "path", None)
    fs = getattr(store, "fs", None)
    if fs is not None and path is not None:
        protocol = fs.protocol[0] if isinstance(fs.protocol, tuple | list) else fs.protocol
        if protocol in ("memory", "file", "local") or not protocol:
            return f"{protocol or 'file'}://{path.lstrip('/') if protocol == 'memory' else path}"
        return f"{protocol}://{path}"
    return str(store)
