"""What ``zopt verify`` checks beyond each array: the groups' attributes, and the consolidated
metadata copy against each node's own document.

- ``group_differences(src, dst, job_id)``: every group of either store (``""`` the root,
  ``GROUP`` / ``GROUP/SUB`` by hierarchy path) present in both, with the same attributes
  (compared as JSON values; xarray's ``_NCProperties``-style internals are attributes like any
  other). A netCDF/HDF5 source has one group here, its root (the Dataset's attributes), and so
  do several files combined (the attributes recompress writes: the first file's). Icechunk
  snapshots and other zarr Stores are read through zarr.
- ``consolidated_differences(dst)``: the copy of every node's metadata that zarr's
  ``consolidate_metadata`` puts in the root document (``consolidated_metadata`` of the root
  ``zarr.json``, Zarr v3; ``.zmetadata``, v2) is what xarray and zarr readers opening the store
  consolidated see. Each entry must equal the node's own document (shape, data type, fill value,
  codecs, attributes, dimension names: the whole document), and every node must have one.
Each difference is one text naming the node's path.

Also the comparison of one array's metadata that ``zopt.verify`` uses: ``ArrayMeta`` (what it
reads of an array), ``compare_metadata`` (shape, data type, fill value bit for bit, dimension
names, attributes), ``plain`` (a value as JSON holds it) and ``decode_fill`` (xarray's base64
``_FillValue``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import struct
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from zarr.abc.store import Store

    from zopt.io.source_kinds import Source

__all__ = ["ArrayMeta", "compare_metadata", "consolidated_differences", "decode_fill", "group_differences", "plain",
           "same_fill"]


@dataclass
class ArrayMeta:
    """What ``zopt.verify`` reads of one array's metadata (a Zarr array, or a variable of a file).

    fill : the fill value (``_FillValue`` where xarray stored one), None where the store states none.
    dims : the dimension names, None where it names none. inner, unit : Zarr's inner chunk shape and
    write unit (the shard shape; the chunk shape when unsharded), None for a file's variable.
    lossy : the ``zopt_lossy`` record (``zopt.lossy.check``), None for an array written exactly.
    zarr_fill : Zarr's own ``fill_value`` (the lossy sentinels start from it).
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    fill: object
    attrs: dict[str, Any]
    dims: tuple[str | None, ...] | None
    inner: tuple[int, ...] | None = None
    unit: tuple[int, ...] | None = None
    lossy: dict[str, Any] | None = None
    zarr_fill: object = None


def _json(value: object) -> str:
    """A canonical JSON text of a metadata document or attribute value."""
    return json.dumps(plain(value), sort_keys=True, default=str)


def plain(value: object) -> Any:
    """An attribute value as JSON would hold it (numpy values and arrays from netCDF included)."""
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()] if value.ndim else plain(value.item())
    if isinstance(value, np.generic):
        return plain(value.item())
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def decode_fill(value: object, dtype: np.dtype) -> Any:
    """xarray's ``_FillValue`` attribute in a Zarr store (floats as base64 of a little-endian double)."""
    if dtype.kind == "f" and isinstance(value, str) and value not in ("NaN", "Infinity", "-Infinity"):
        with contextlib.suppress(ValueError, struct.error):
            return struct.unpack("<d", base64.standard_b64decode(value))[0]
    if dtype.kind == "c" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        with contextlib.suppress(ValueError, struct.error):
            re, im = (struct.unpack("<d", base64.standard_b64decode(v))[0] for v in value)
            return complex(re, im)
    return value


def same_fill(a: object, b: object, dtype: np.dtype) -> bool:
    """Are two fill values the same bits in ``dtype`` (NaN payloads and -0.0 count)?"""
    if dtype.kind in "OUS" or dtype.hasobject:
        return a == b
    try:
        x, y = np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        return a == b
    return x.tobytes() == y.tobytes()


def compare_metadata(s: ArrayMeta, d: ArrayMeta) -> list[str]:
    """One text per difference between two arrays' metadata: ``s`` the source's, ``d`` the destination's."""
    out = []
    if s.shape != d.shape:
        out.append(f"shape {s.shape} in src, {d.shape} in dst")
    if s.dtype != d.dtype:
        out.append(f"dtype {s.dtype} in src, {d.dtype} in dst")
    elif s.fill is not None and (d.fill is None or not same_fill(s.fill, d.fill, d.dtype)):
        out.append(f"fill value {plain(s.fill)} in src, {plain(d.fill)} in dst")
    if s.dims != d.dims:
        out.append(f"dimension names {s.dims} in src, {d.dims} in dst")
    for key in sorted(set(s.attrs) | set(d.attrs)):
        if key not in d.attrs:
            out.append(f"attribute {key!r} only in src")
        elif key not in s.attrs:
            out.append(f"attribute {key!r} only in dst")
        elif s.attrs[key] != d.attrs[key]:
            out.append(f"attribute {key!r}: {s.attrs[key]!r} in src, {d.attrs[key]!r} in dst")
    return out


def _is_root_array(store: str | Store) -> bool:
    """A store whose root is an array (a path or URL, or a zarr Store such as Icechunk's)."""
    import zarr

    from zopt.io.sources import root_array_metadata

    if isinstance(store, str):
        return root_array_metadata(store) is not None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Object at \.?zopt-", category=UserWarning)
        return isinstance(zarr.open(store, mode="r"), zarr.Array)


def _zarr_groups(store: str | Store) -> dict[str, dict[str, Any]]:
    import zarr

    if _is_root_array(store):
        return {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Object at \.?zopt-", category=UserWarning)
        root = zarr.open_group(store, mode="r", use_consolidated=False)
        out = {"": dict(root.attrs)}
        for path, node in root.members(max_depth=None):
            if isinstance(node, zarr.Group):
                out[path] = dict(zarr.open_group(store, path=path, mode="r", use_consolidated=False).attrs)
    return out


def _groups(source: Source, job_id: str) -> dict[str, dict[str, Any]]:
    store = source.zarr_store()
    if store is not None:
        return _zarr_groups(store)
    return {"": dict(source.template(job_id).attrs)}  # a netCDF file, or several combined: what the job wrote


def group_differences(src: Source, dst: Source, job_id: str) -> list[str]:
    """One text per group attribute that differs, or group present in one store only. ``src`` and
    ``dst``: ``zopt.io.source_kinds.Source``s (``open_source``): paths or URLs, zarr Stores (an
    Icechunk snapshot's), or several files combined (``zopt.io.multi.MultiSource``: one group, its
    root, with the attributes the job writes)."""
    theirs, ours = _groups(src, job_id), _groups(dst, job_id)
    out = []
    for path in sorted(set(theirs) | set(ours)):
        name = f"group {path!r}" if path else "root group"
        if path not in ours or path not in theirs:
            out.append(f"{name}: {'not in dst' if path not in ours else 'not in the source'}")
            continue
        s, d = theirs[path], ours[path]
        for key in sorted(set(s) | set(d)):
            if key not in d:
                out.append(f"{name}: attribute {key!r} only in src")
            elif key not in s:
                out.append(f"{name}: attribute {key!r} only in dst")
            elif _json(s[key]) != _json(d[key]):
                out.append(f"{name}: attribute {key!r}: {s[key]!r} in src, {d[key]!r} in dst")
    return out


def consolidated_differences(dst: str | Store) -> list[str]:
    """One text per node whose consolidated copy (root document) differs from its own document,
    or that one of the two lacks. ``[]`` when ``dst`` (a path, URL or zarr Store) has no
    consolidated metadata."""
    import zarr

    if _is_root_array(dst):
        return []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Object at \.?zopt-", category=UserWarning)
        warnings.filterwarnings("ignore", message="Failed to open Zarr store with consolidated")
        try:
            root = zarr.open_group(dst, mode="r", use_consolidated=True)
        except ValueError:  # no consolidated metadata: nothing a reader could be misled by
            return []
        consolidated = root.metadata.consolidated_metadata
        if consolidated is None:
            return []
        copies = {k: v.to_dict() for k, v in consolidated.flattened_metadata.items()}
        plain = zarr.open_group(dst, mode="r", use_consolidated=False)
        own = {p: n.metadata.to_dict() for p, n in plain.members(max_depth=None)}
    out = []
    for path in sorted(set(copies) | set(own)):
        if path not in own:
            out.append(f"consolidated metadata: {path!r} has an entry but no zarr.json of its own")
        elif path not in copies:
            out.append(f"consolidated metadata: {path!r} is missing (readers opening the store consolidated do not see it)")
        else:
            a, b = _strip(copies[path]), _strip(own[path])
            if _json(a) != _json(b):
                keys = sorted(k for k in set(a) | set(b) if _json(a.get(k)) != _json(b.get(k)))
                out.append(f"consolidated metadata: {path!r} disagrees with its zarr.json in {', '.join(keys)} "
                           "(readers opening the store consolidated see the copy)")
    return out


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    """A node's document without its own nested consolidated copy (compared at the root only)."""
    return {k: v for k, v in doc.items() if k != "consolidated_metadata"}
