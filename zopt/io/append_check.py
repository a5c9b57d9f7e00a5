"""Appending files to a store zopt wrote: the store described, the new files checked against it, and
the source that reads the store's old rows and the new files' rows as one array.

``describe_store(dst)`` reads a local Zarr v3 store's metadata documents (no chunk is read): each
array's ``zarr.json`` and the root's. ``check_against_store`` compares what a fresh job on the new
files would write (their target metadata, made in memory with the store's chunk grids) with the
store, as ``zopt.io.multi`` compares the files with each other: the same arrays, data types, fill
values, attributes (CF packing included), dimension names, sizes off the concat dimension, and the
same values for the arrays without it; ``check_after`` the concat coordinate: the new files start
strictly after the store's last value (an overlap is refused naming the file; a gap, or a step
other than the store's, is a note). Each refusal is an ``OptionError`` on ``src`` naming the files
and the store; nothing is written here.

``AppendedSource`` is a ``zopt.io.source_kinds.Source`` over ``old + new`` rows along the concat
dimension: rows below the store's old length are read from the store (only the last, partly filled
shard's are), the others from the new files (a ``zopt.io.multi.MultiSource``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import xarray as xr

from zopt.errors import OptionError
from zopt.io.source_kinds import CombinedSource, Source, SourceIdentity, SourceVariable
from zopt.notes import Note

if TYPE_CHECKING:
    from zarr.abc.store import Store

__all__ = ["AppendedSource", "StoreArray", "StoreDescription", "check_after", "check_against_store",
           "check_constants", "describe_store", "describe_zarr_store"]

#: codecs whose parameters were fitted to the files a store was made from (one exact packing of files
#: packed differently, ``zopt.io.packing``): new files may need other ones, so such arrays are not appended
_FITTED = ("scale_offset", "cast_value")


@dataclass(frozen=True)
class StoreArray:
    """One array of the store: its ``zarr.json`` as a dict (``meta``), and what the append keeps of it."""

    name: str
    meta: dict[str, Any]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.meta["shape"])

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(self.meta.get("dimension_names") or ())

    @property
    def grid(self) -> tuple[int, ...]:
        """The chunk grid's chunk shape: the shard shape of a sharded array."""
        return tuple(int(s) for s in self.meta["chunk_grid"]["configuration"]["chunk_shape"])

    @property
    def sharding(self) -> dict[str, Any] | None:
        first = self.meta["codecs"][0] if self.meta["codecs"] else {}
        return first.get("configuration") if first.get("name") == "sharding_indexed" else None

    @property
    def inner(self) -> tuple[int, ...]:
        """The inner chunk shape (the grid's chunk shape when unsharded)."""
        sharding = self.sharding
        return tuple(int(s) for s in sharding["chunk_shape"]) if sharding is not None else self.grid

    @property
    def layout(self) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        """``(inner chunk shape, shard shape or None)`` as ``zopt.job.work.layouts_for`` gives them."""
        return (self.inner, self.grid) if self.sharding is not None else (self.grid, None)

    @property
    def chain(self) -> list[dict[str, Any]]:
        """The codec chain inside the shards (the whole chain when unsharded)."""
        sharding = self.sharding
        return list(sharding["codecs"]) if sharding is not None else list(self.meta["codecs"])

    def with_length(self, axis: int, length: int) -> dict[str, Any]:
        """``meta`` with ``length`` along ``axis``; everything else as it is."""
        meta: dict[str, Any] = json.loads(json.dumps(self.meta))
        meta["shape"][axis] = length
        return meta


@dataclass(frozen=True)
class StoreDescription:
    """A Zarr v3 store's root document (``root``) and arrays (``arrays``, by name); ``path``: how
    messages name it; ``location``: what zarr opens to read its values (a local path or a Store)."""

    path: str
    root: dict[str, Any]
    arrays: dict[str, StoreArray]
    location: Store | None = None

    @property
    def where(self) -> str | Store:
        return self.path if self.location is None else self.location


def _read_json(path: str, what: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError as exc:
        raise OptionError("dst", f"{what}: {path} does not exist; --append extends a Zarr v3 store zopt wrote") from exc
    except ValueError as exc:
        raise OptionError("dst", f"{what}: {path} is not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise OptionError("dst", f"{what}: {path} is not a Zarr metadata document")
    return doc


def _check_root(root: dict[str, Any], dst: str) -> None:
    if root.get("zarr_format") != 3 or root.get("node_type") != "group":
        raise OptionError("dst", f"{dst!r} is not a Zarr v3 group; --append extends a store zopt wrote from files "
                          "combined along a dimension")


def _child_group(dst: str, name: str) -> OptionError:
    return OptionError("dst", f"{dst!r} has the child group {name!r}; --append extends a store of arrays combined "
                       "from files (without groups)")


def describe_zarr_store(store: Store, text: str) -> StoreDescription:
    """``describe_store`` of a zarr Store (an Icechunk session's): its root's ``zarr.json`` and its
    arrays' (``list_dir`` of the root), named ``text`` in messages."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    def doc(key: str) -> dict[str, Any]:
        raw = sync(store.get(key, prototype=default_buffer_prototype()))
        if raw is None:
            raise OptionError("dst", f"{text}: no {key}; --append extends a Zarr v3 store zopt wrote")
        out: dict[str, Any] = json.loads(raw.to_bytes())
        return out

    async def names() -> list[str]:
        return [n async for n in store.list_dir("")]

    root = doc("zarr.json")
    _check_root(root, text)
    arrays = {}
    for name in sorted(n for n in sync(names()) if n != "zarr.json" and not n.startswith(".")):
        meta = doc(f"{name}/zarr.json")
        if meta.get("node_type") != "array":
            raise _child_group(text, name)
        arrays[name] = StoreArray(name, meta)
    return StoreDescription(text, root, arrays, store)


def describe_store(dst: str) -> StoreDescription:
    """The root group and arrays of the local Zarr v3 store ``dst`` (its ``zarr.json`` documents;
    no chunk read). OptionError naming ``dst`` for a store that is not a Zarr v3 group of arrays
    (a root array, child groups, another Zarr format)."""
    root = _read_json(os.path.join(dst, "zarr.json"), f"dst {dst!r}")
    _check_root(root, dst)
    arrays: dict[str, StoreArray] = {}
    for entry in sorted(os.scandir(dst), key=lambda e: e.name):
        doc_path = os.path.join(entry.path, "zarr.json")
        if not entry.is_dir() or entry.name.startswith(".") or not os.path.exists(doc_path):
            continue
        doc = _read_json(doc_path, f"dst {dst!r}")
        if doc.get("node_type") != "array":
            raise _child_group(dst, entry.name)
        arrays[entry.name] = StoreArray(entry.name, doc)
    return StoreDescription(dst, root, arrays)


def _same(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def check_against_store(store: StoreDescription, new: dict[str, dict[str, Any]], dim: str,
                        files: Sequence[str]) -> None:
    """OptionError on ``src`` naming the new ``files`` and the store when an array the new files
    make (``new``: ``{name: zarr.json dict}``, as a fresh job on them would write it with the
    store's chunk grids) differs from the store's: the arrays, data type, fill value, attributes
    (CF packing included), dimension names, and sizes off ``dim``; an array along ``dim`` whose
    codecs were fitted to the old files (``scale_offset``/``cast_value``) is refused too."""
    where = f"{files[0]} … {files[-1]}" if len(files) > 1 else files[0]
    head = f"the new files ({where}) differ from dst {store.path!r}"
    only_new, only_old = sorted(set(new) - set(store.arrays)), sorted(set(store.arrays) - set(new))
    if only_new or only_old:
        what = "; ".join(x for x in (f"variables {only_new} only in the new files" if only_new else "",
                                     f"variables {only_old} only in dst" if only_old else "") if x)
        raise OptionError("src", f"{head}: {what}")
    for name, old in store.arrays.items():
        meta = new[name]
        if tuple(meta.get("dimension_names") or ()) != old.dims:
            raise OptionError("src", f"{head}: variable {name!r}: dimensions {meta.get('dimension_names')} there, "
                              f"{list(old.dims)} in dst")
        for key, what in (("data_type", "data type"), ("fill_value", "fill value")):
            if not _same(meta.get(key), old.meta.get(key)):
                raise OptionError("src", f"{head}: variable {name!r}: {what} {meta.get(key)!r} there, "
                                  f"{old.meta.get(key)!r} in dst (packed or typed otherwise: append files made "
                                  "like the ones dst was made from)")
        off = [(d, int(a), int(b)) for d, a, b in zip(old.dims, meta["shape"], old.shape, strict=True)
               if d != dim and a != b]
        if off:
            d, a, b = off[0]
            raise OptionError("src", f"{head}: variable {name!r}: size {a} along {d!r} there, {b} in dst")
        attrs_new, attrs_old = meta.get("attributes", {}), old.meta.get("attributes", {})
        for k in sorted(set(attrs_new) | set(attrs_old)):
            if not _same(attrs_new.get(k), attrs_old.get(k)):
                what = "fill value" if k in ("_FillValue", "missing_value") else f"attribute {k!r}"
                raise OptionError("src", f"{head}: variable {name!r}: {what} {attrs_new.get(k)!r} there, "
                                  f"{attrs_old.get(k)!r} in dst")
        if dim in old.dims and any(c.get("name") in _FITTED for c in old.chain):
            raise OptionError("src", f"dst {store.path!r}: variable {name!r} holds files packed differently, "
                              "re-expressed in one exact packing fitted to them (scale_offset + cast_value), which "
                              f"new files ({where}) may not fit: recompress the whole archive instead of --append")


def values_digest(values: np.ndarray) -> str:
    """The digest ``zopt.io.multi`` keeps of a variable without the concat dimension."""
    values = np.ascontiguousarray(values)
    raw = values.tobytes() if values.dtype.kind != "O" else repr(values.tolist()).encode()
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def check_constants(store: StoreDescription, digests: dict[str, str], read: Callable[[str], npt.ArrayLike],
                    files: Sequence[str]) -> None:
    """OptionError naming the first new file and the store when an array without the concat
    dimension (``digests``: ``{name: values digest}`` of the new files) has other values in the
    store (``read(name)``: its values)."""
    for name, digest in digests.items():
        if name in store.arrays and values_digest(np.asarray(read(name))) != digest:
            raise OptionError("src", f"{files[0]} differs from dst {store.path!r}: variable {name!r} (without the "
                              "concat dimension) has other values there")


def _plain(value: object) -> str:
    return repr(value.item()) if isinstance(value, np.generic) else repr(value)


def check_after(store_coord: np.ndarray, new_coord: np.ndarray, starts: Sequence[int], files: Sequence[str],
                dim: str, dst: str) -> list[Note]:
    """The new files' ``dim`` coordinate (``new_coord``, the files in combined order, file ``i``
    from ``starts[i]``) strictly after the store's (``store_coord``, its last values): an overlap is
    an OptionError naming the first new file whose values do not follow the store's last one; a
    gap (more than 1.5 times the store's typical step) or another step is a note."""
    if store_coord.size == 0 or new_coord.size == 0:
        return []
    last, first = store_coord[-1], new_coord[0]
    if not first > last:
        reach = np.flatnonzero(~(new_coord > last))
        i = int(np.searchsorted(np.asarray(starts), int(reach[-1]), side="right") - 1)
        overlapping = [f for j, f in enumerate(files) if starts[j] <= reach[-1]]
        named = ", ".join(overlapping[:5]) + (f" and {len(overlapping) - 5} more" if len(overlapping) > 5 else "")
        raise OptionError("src", f"{named} overlap{'s' if len(overlapping) == 1 else ''} dst {dst!r} along {dim!r}: "
                          f"{files[i]} has {_plain(new_coord[int(reach[-1])])}, dst ends at {_plain(last)}; "
                          "append only what comes after")
    steps = np.diff(store_coord)
    typical = float(np.median(steps)) if steps.size else None
    step = first - last
    if typical and step > 1.5 * typical:
        return [Note(f"gap along {dim!r}: dst {dst} ends at {_plain(last)}, {files[0]} starts at {_plain(first)} "
                     f"(typical step {typical!r})", "source")]
    inside = np.diff(new_coord[:starts[1]] if len(starts) > 1 else new_coord)
    if typical and inside.size and not np.isclose(float(np.median(inside)), typical):
        return [Note(f"step along {dim!r}: {files[0]} steps by {float(np.median(inside))!r}, dst by {typical!r}",
                     "source")]
    return []


class AppendedSource(CombinedSource):
    """The store's ``old`` rows along ``dim`` then the rows of ``new`` (several files combined,
    ``zopt.io.multi.MultiSource``), as one ``Source``: ``variables`` are the new files' with the
    combined length; ``read`` takes rows below ``old`` from the store at ``path`` (through zarr)
    and the others from ``new``; arrays without ``dim`` from the store. Plain class (a Dask task
    argument)."""

    def __init__(self, path: str | Store, old: int, new: Source) -> None:
        assert new.concat_dim is not None  # several files combined
        self.path, self.old, self.new, self.dim = path, old, new, new.concat_dim
        self.text = new.text
        self.files = tuple(new.files)
        self.repacks = new.repacks

    @property
    def concat_dim(self) -> str | None:
        return self.dim

    def total_bytes(self) -> int:
        return self.new.total_bytes()

    def identify(self, names: Sequence[str]) -> SourceIdentity:
        return self.new.identify(names)

    def variables(self, job_id: str | None = None) -> dict[str, SourceVariable]:
        out = {}
        for name, v in self.new.variables(job_id).items():
            shape = tuple(s + self.old if d == self.dim else s for d, s in zip(v.dims, v.shape, strict=True))
            out[name] = SourceVariable(shape, v.dtype, v.dims)
        return out

    def _store(self, name: str, region: tuple[slice, ...]) -> np.ndarray:
        from zopt.compat.zarr_compat import open_array

        return np.asarray(open_array(self.path, path=name, mode="r")[region])

    def read(self, name: str, region: tuple[slice, ...], job_id: str | None = None) -> np.ndarray:
        dims = self.new.variables(job_id)[name].dims
        if self.dim not in dims:
            return self._store(name, region)
        axis = dims.index(self.dim)
        lo, hi = region[axis].start or 0, region[axis].stop
        parts = []
        if lo < self.old:
            old = list(region)
            old[axis] = slice(lo, min(hi, self.old))
            parts.append(self._store(name, tuple(old)))
        if hi > self.old:
            new = list(region)
            new[axis] = slice(max(lo, self.old) - self.old, hi - self.old)
            parts.append(np.asarray(self.new.read(name, tuple(new), job_id)))
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)

    def template(self, job_id: str | None = None) -> xr.Dataset:
        return self.new.template(job_id)
