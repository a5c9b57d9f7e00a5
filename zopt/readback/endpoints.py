"""What ``zopt verify`` and ``recompress --verify`` take as SRC and DST, and how they name them.

``is_store``: a zarr Store object (an Icechunk snapshot's, or a Store destination before its
publish), read through zarr; ``store_is_zarr``: one with Zarr metadata at its root;
``endpoint_text``: a path, URL, Store or Icechunk repository as a user names it;
``check_endpoint_types``: ValueError naming ``src`` or ``dst`` of a type ``recompress`` does not
take; ``written_output``: what ``before_publish`` hands over, as ``verify`` reads it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TypeAlias, TypeGuard

if TYPE_CHECKING:
    from icechunk import Repository
    from zarr.abc.store import Store

from zopt.errors import OptionError

__all__ = ["Endpoint", "check_endpoint_types", "endpoint_text", "is_store", "store_is_zarr", "written_output"]

#: a store ``verify`` and ``recompress`` take: a local path, an fsspec or ``icechunk://`` URL, a zarr
#: Store, an ``icechunk.Repository``
Endpoint: TypeAlias = "str | os.PathLike[str] | Store | Repository"


def is_store(store: object) -> TypeGuard[Store]:
    """A zarr Store object (an Icechunk snapshot), read through zarr; not a path, a URL or several
    files combined (``zopt.io.multi.MultiSource``, read through xarray like one file)."""
    from zarr.abc.store import Store

    return isinstance(store, Store)


def store_is_zarr(store: Store) -> bool:
    """Does a zarr Store hold Zarr metadata at its root?"""
    from zarr.core.sync import sync

    return any(sync(store.exists(n)) for n in ("zarr.json", ".zgroup", ".zarray"))


def endpoint_text(x: object) -> str:
    """A store or destination as a user names it."""
    from zopt.compat.icechunk_compat import is_icechunk, open_ref
    from zopt.io.paths import store_text

    if isinstance(x, str | os.PathLike):
        return os.fspath(x)
    if is_icechunk(x):
        return open_ref(x).text
    return store_text(x)


def check_endpoint_types(src: object, dst: object, concat_dim: str | None) -> None:
    """ValueError naming ``src`` or ``dst`` when it is not of a type ``recompress`` takes (any
    object is checked: these are the values a user gave)."""
    from zopt.compat.icechunk_compat import is_icechunk

    if not (isinstance(dst, str | os.PathLike) or is_store(dst) or is_icechunk(dst)):
        raise OptionError("dst", f"a {type(dst).__name__} is not a destination; give what recompress takes: a path "
                         "(str or os.PathLike), an fsspec or icechunk:// URL, a zarr Store or an icechunk.Repository")
    several = (concat_dim is not None and isinstance(src, list | tuple) and len(src) > 0
               and all(isinstance(x, str | os.PathLike) for x in src))
    if not (isinstance(src, str | os.PathLike) or is_icechunk(src) or several):
        raise OptionError("src", f"a {type(src).__name__} is not a source; give a path or URL (str or os.PathLike), "
                         "or with concat_dim a glob or a non-empty list of them")


def _is_repository(x: object) -> TypeGuard[Repository]:
    """An ``icechunk.Repository`` (an Icechunk destination given as no URL)."""
    from zopt.compat.icechunk_compat import is_icechunk

    return is_icechunk(x) and not isinstance(x, str)


def written_output(partial: object, dst: Endpoint) -> str | Store:
    """What ``before_publish`` hands over (``partial``), as ``verify`` reads it: a local partial
    directory or an Icechunk commit URL as it is; an ``icechunk.Repository``'s commit
    (``…@snapshot:ID``) as its read-only store; a Store destination's partial (the store); a URL
    destination by its URL. TypeError for a ``partial`` no job hands over."""
    if _is_repository(dst):  # the text names the job's snapshot
        return dst.readonly_session(snapshot_id=str(partial).rpartition("@snapshot:")[2]).store
    if isinstance(partial, str):
        return partial
    if is_store(dst) and is_store(partial):  # written in place: the partial output is the store
        return partial
    if isinstance(dst, str | os.PathLike):  # a URL destination written in place: read by its URL
        return os.fspath(dst)
    raise TypeError(f"before_publish got a {type(partial).__name__} for a {type(dst).__name__} destination")
