"""The ``Source`` protocol: what a job reads, and ``open_source``, the factory of its kinds.

``Source`` is what recompress, verify, analyze and the lossy analysis read: its variables, a
region of one, a lazy template of the whole, its identity for the journal, the files it reads.
``open_source(src)`` makes one: the first kind of ``SOURCE_KINDS`` that claims ``src`` (a path or
URL: ``zopt.io.sources.PathSource``, a Zarr store or a netCDF/HDF5 file; with ``concat_dim``,
several files: ``zopt.io.multi.MultiSource``); a Source is returned as it is. A new kind is one
class with ``claims``/``open`` and the protocol's members, and one line in ``SOURCE_KINDS``.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np
import xarray as xr

from zopt.notes import Note

__all__ = ["SOURCE_KINDS", "CombinedSource", "Source", "SourceIdentity", "SourceVariable", "open_source"]


@dataclass(frozen=True)
class SourceVariable:
    """What the engine needs of a source variable: shape, numpy dtype and dimension names."""

    shape: tuple[int, ...]
    dtype: np.dtype
    dims: tuple[str, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class SourceIdentity:
    """What the journal's fingerprint takes of a source (``zopt.store.journal.fingerprint``): ``text``
    its name; ``digest`` every file's identity when the source has it (several files), else None
    (the journal reads the path's own); ``files`` the per-file table naming changed files, or None."""

    text: str
    digest: str | None = None
    files: str | None = None


@runtime_checkable
class Source(Protocol):
    """What a job reads: one path (``PathSource``), several files (``zopt.io.multi.MultiSource``),
    an in-memory Dataset (``zopt.xarray``). Picklable: Dask tasks take it as an argument.

    text : how messages and reports name it. location : the one local path or URL it is (a Zarr
    store or a file), or None (several files, a Dataset): what Zarr-level reads, group discovery
    and metadata checks take. files : the files (paths or URLs) it reads.
    concat_dim : the dimension several files are combined along, or None. repacks : the variables
    of files packed differently, ``{name: zopt.io.packing.Repack}`` (re-expressed on read). notes :
    what opening it found worth a note in the job's report (gaps between files, re-expressions).
    ``total_bytes()``: the bytes of its files."""

    @property
    def text(self) -> str: ...

    @property
    def location(self) -> str | None: ...

    @property
    def files(self) -> tuple[str, ...]: ...

    @property
    def concat_dim(self) -> str | None: ...

    @property
    def repacks(self) -> Mapping[str, Any]: ...

    @property
    def notes(self) -> Sequence[Note]: ...

    def zarr_store(self) -> Any:
        """The Zarr store it is, as zarr opens it (a path, a URL or a zarr Store), or None (a netCDF
        file, several files, a Dataset)."""
        ...

    def total_bytes(self) -> int:
        """Bytes of the files it reads (the report's source bytes)."""
        ...

    def variables(self, job_id: str | None = None) -> dict[str, SourceVariable]:
        """``{name: SourceVariable}``: shape, numpy dtype and dimension names of each variable."""
        ...

    def read(self, name: str, region: tuple[slice, ...], job_id: str | None = None) -> np.ndarray:
        """The values of ``region`` of variable ``name``, as stored (no CF decoding)."""
        ...

    def template(self, job_id: str | None = None) -> xr.Dataset:
        """The whole source as a lazy Dataset (no CF decoding): attributes, coordinates, encodings."""
        ...

    def identify(self, names: Sequence[str]) -> SourceIdentity:
        """Its identity for the journal's fingerprint of a job rewriting ``names``."""
        ...


# (members are methods where computing them costs: a runtime isinstance check reads every attribute)

#: the kinds ``open_source`` tries in order, as ``module:Class`` (loaded on first use, like entry
#: points, so a kind's module may import this one): each has ``claims(src, concat_dim) -> bool`` and
#: ``open(src, concat_dim, combine, scheduler) -> Source``
SOURCE_KINDS: tuple[str, ...] = (
    "zopt.io.multi:MultiSource",  # several files combined along concat_dim
    "zopt.io.store_source:StoreSource",  # a zarr Store object (an Icechunk snapshot's)
    "zopt.io.sources:PathSource",  # one path or URL: a Zarr store, a netCDF/HDF5 file
)


def open_source(src: object, *, concat_dim: str | None = None, combine: str = "by_coords",
                scheduler: str | None = None) -> Source:
    """``src`` as a ``Source``: a Source as it is, else the first of ``SOURCE_KINDS`` that claims it.

    src : a local path or fsspec URL (``str`` or ``os.PathLike``; not resolved here: the job resolves
    it on the client first), or with ``concat_dim`` a glob or a list of them (``zopt.io.multi.open_multi``:
    ValueError/FileNotFoundError naming the file). combine, scheduler : as ``open_multi``'s.
    ValueError for anything no kind takes. Opens nothing for a path: its reads do."""
    if _a_source(src):
        return cast(Source, src)
    for entry in SOURCE_KINDS:
        kind = _kind(entry)
        if kind.claims(src, concat_dim):
            return cast(Source, kind.open(src, concat_dim, combine, scheduler))
    raise ValueError(f"src: a {type(src).__name__} is not a source; give a path or URL (str or os.PathLike), "
                     "or with concat_dim a glob or a non-empty list of them")


@functools.cache
def _kind(entry: str) -> Any:
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


_SOURCE_TYPES: dict[type, bool] = {}


def _a_source(src: object) -> bool:
    """``isinstance(src, Source)``, answered once per type: a runtime protocol check reads every
    member (~50 µs), and ``read_source`` asks it on every read."""
    known = _SOURCE_TYPES.get(type(src))
    if known is None:
        known = _SOURCE_TYPES[type(src)] = isinstance(src, Source)
    return known


class CombinedSource:
    """A base for sources that are not one path (``zopt.io.multi.MultiSource``, an in-memory
    Dataset): no location, no concat dimension, nothing re-expressed, unless the subclass says so."""

    text: str  # how messages and reports name it
    location: str | None = None
    files: tuple[str, ...] = ()
    repacks: Mapping[str, Any] = MappingProxyType({})
    notes: Sequence[Note] = ()

    @property
    def concat_dim(self) -> str | None:
        return None

    def total_bytes(self) -> int:
        return 0

    def zarr_store(self) -> Any:
        return None

    def variables(self, job_id: str | None = None) -> dict[str, SourceVariable]:
        raise NotImplementedError

    def read(self, name: str, region: tuple[slice, ...], job_id: str | None = None) -> np.ndarray:
        raise NotImplementedError

    def template(self, job_id: str | None = None) -> xr.Dataset:
        raise NotImplementedError

    def identify(self, names: Sequence[str]) -> SourceIdentity:
        return SourceIdentity(self.text)
