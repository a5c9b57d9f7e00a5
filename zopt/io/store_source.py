"""A zarr Store object as a source: an Icechunk snapshot's store, or a store destination before its publish.

``StoreSource`` is what ``zopt verify`` reads of a ``zarr.abc.store.Store`` (``open_source(store)``):
its root group's arrays through zarr, no file of its own (``location`` None, ``files`` empty).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr
import zarr

from zopt.compat.zarr_compat import open_array
from zopt.io.paths import store_text
from zopt.io.source_kinds import SourceIdentity, SourceVariable
from zopt.notes import Note

if TYPE_CHECKING:
    from zarr.abc.store import Store

__all__ = ["StoreSource"]


class StoreSource:
    """A ``zarr.abc.store.Store`` as a ``zopt.io.source_kinds.Source``: read through zarr."""

    location: str | None = None
    files: tuple[str, ...] = ()
    concat_dim: str | None = None
    repacks: Mapping[str, Any] = MappingProxyType({})
    notes: Sequence[Note] = ()

    @classmethod
    def claims(cls, src: object, concat_dim: str | None) -> bool:
        from zarr.abc.store import Store

        return concat_dim is None and isinstance(src, Store)

    @classmethod
    def open(cls, src: Store, concat_dim: str | None, combine: str, scheduler: str | None) -> StoreSource:
        return cls(src)

    def __init__(self, store: Store) -> None:
        self.store = store
        self.text = store_text(store)

    def zarr_store(self) -> Store:
        return self.store

    def total_bytes(self) -> int:
        return 0  # not measured: keys of a store (an Icechunk snapshot) have no files to add up

    def variables(self, job_id: str | None = None) -> dict[str, SourceVariable]:
        """The root group's arrays (``dim_0``… for arrays without dimension names), or a root array's."""
        node = zarr.open(self.store, mode="r")
        arrays = [("", node)] if isinstance(node, zarr.Array) else list(node.arrays())
        return {name: SourceVariable(tuple(a.shape), a.dtype, tuple(
            str(d) if d else f"dim_{i}" for i, d in enumerate(
                (a.metadata.dimension_names if a.metadata.zarr_format == 3 else None) or (None,) * a.ndim)))
            for name, a in arrays}

    def read(self, name: str, region: tuple[slice, ...], job_id: str | None = None) -> np.ndarray:
        return np.asarray(open_array(self.store, path=name, mode="r")[region])

    def template(self, job_id: str | None = None) -> xr.Dataset:
        # xarray's zarr engine opens a zarr Store; its annotation of the argument omits it
        return xr.open_dataset(self.store, engine="zarr", consolidated=False,  # type: ignore[arg-type]
                               decode_cf=False, mask_and_scale=False, decode_times=False, chunks=None)

    def identify(self, names: Sequence[str]) -> SourceIdentity:
        return SourceIdentity(self.text)
