"""What ``zopt verify`` checks beyond each array: the groups' attributes, and the consolidated
metadata copy against each node's own document.

- ``group_differences(src, dst, token)``: every group of either store (``""`` the root,
  ``GROUP`` / ``GROUP/SUB`` by hierarchy path) present in both, with the same attributes
  (compared as JSON values; xarray's ``_NCProperties``-style internals are attributes like any
  other). A netCDF/HDF5 source has one group here, its root (the Dataset's attributes).
- ``consolidated_differences(dst)``: the copy of every node's metadata that zarr's
  ``consolidate_metadata`` puts in the root document (``consolidated_metadata`` of the root
  ``zarr.json``, Zarr v3; ``.zmetadata``, v2) is what xarray and zarr readers opening the store
  consolidated see. Each entry must equal the node's own document (shape, data type, fill value,
  codecs, attributes, dimension names: the whole document), and every node must have one.
Each difference is one text naming the node's path.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

__all__ = ["consolidated_differences", "group_differences"]


def _json(value: Any) -> str:
    """A canonical JSON text of a metadata document or attribute value (numpy values as
    Python's, NaN as ``NaN``)."""
    return json.dumps(value, sort_keys=True, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))


def _zarr_groups(store: str) -> dict[str, dict[str, Any]]:
    import zarr

    from zopt.io.sources import root_array_metadata

    if root_array_metadata(store) is not None:
        return {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Object at \.zopt-", category=UserWarning)
        root = zarr.open_group(store, mode="r", use_consolidated=False)
        out = {"": dict(root.attrs)}
        for path, node in root.members(max_depth=None):
            if isinstance(node, zarr.Group):
                out[path] = dict(zarr.open_group(store, path=path, mode="r", use_consolidated=False).attrs)
    return out


def _groups(store: str, token: str) -> dict[str, dict[str, Any]]:
    from zopt.io.sources import is_zarr, open_source

    if is_zarr(store):
        return _zarr_groups(store)
    return {"": dict(open_source(store, token).attrs)}


def group_differences(src: str, dst: str, token: str) -> list[str]:
    """One text per group attribute that differs, or group present in one store only."""
    theirs, ours = _groups(src, token), _groups(dst, token)
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


def consolidated_differences(dst: str) -> list[str]:
    """One text per node whose consolidated copy (root document) differs from its own document,
    or that one of the two lacks. ``[]`` when ``dst`` has no consolidated metadata."""
    import zarr

    from zopt.io.sources import root_array_metadata

    if root_array_metadata(dst) is not None:
        return []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Object at \.zopt-", category=UserWarning)
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
