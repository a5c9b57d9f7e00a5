"""Every metadata document of a Zarr store read and checked before a job uses the store.

zarr-python skips a node whose ``zarr.json`` lacks a required field (a ``UserWarning`` at most)
and reports truncated JSON without naming the file, so a broken array would be silently missing
from a recompressed copy, and from ``zopt verify``'s comparison. ``check_store(path)`` reads
every ``zarr.json`` (v3) and ``.zarray`` / ``.zgroup`` / ``.zattrs`` / ``.zmetadata`` (v2) of
a store (local directory or fsspec URL):

- JSON that does not parse (truncated, invalid, not UTF-8): ``BrokenMetadataError`` naming the
  file and the byte offset (``load_json``);
- an array document lacking a field the Zarr spec requires, or with a field of the wrong type, a
  data type zarr-python does not know, chunk shapes that are not positive integers (one per
  dimension), or a chunk grid of more than ``MAX_CHUNKS`` chunks: the array is broken.

Broken arrays raise ``BrokenMetadataError`` naming each file, unless ``skip_broken``: then
their paths are returned (``recompress --skip-broken`` leaves them out, reports them and exits
with status 3). Only an array lacking a required field can be skipped: zarr-python leaves such a
node out of its group, while any other fault (a wrong type, an unknown data type) makes it fail
on the whole group. A broken group document, a broken root array, or unparseable JSON anywhere,
is never skipped.
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeGuard

from zopt.errors import ZoptError
from zopt.io import locations as loc

__all__ = ["MAX_CHUNKS", "BrokenMetadataError", "check_store", "load_json"]

#: the most chunks (shards) one array may have: zopt lists its chunk grid (info, verify, compact)
MAX_CHUNKS = 10**8

_DOCS = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")
_V3_ARRAY: dict[str, type | tuple[type, ...]] = {"shape": list, "data_type": (str, dict), "chunk_grid": dict, "chunk_key_encoding": dict, "codecs": list}
_V2_ARRAY: dict[str, type | tuple[type, ...]] = {"shape": list, "chunks": list, "dtype": (str, list), "order": str}


class BrokenMetadataError(ZoptError, ValueError):
    """A metadata document that is not valid JSON or not valid Zarr metadata. ``files``: the
    documents (paths or URLs); the message names them and, for JSON, the byte offset."""

    def __init__(self, message: str, files: list[str]) -> None:
        self.files = files
        super().__init__(message)


def load_json(data: bytes, where: str) -> Any:
    """``data`` parsed as JSON; ``BrokenMetadataError`` naming ``where`` and the byte offset of
    the fault (the end of the file for a truncated document)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BrokenMetadataError(f"{where}: not UTF-8 at byte {e.start} of {len(data)}", [where]) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        offset = len(text[: e.pos].encode("utf-8"))
        end = " (truncated?)" if offset >= len(data) else ""
        raise BrokenMetadataError(f"{where}: invalid JSON at byte {offset} of {len(data)}{end}: {e.msg} "
                                  f"(line {e.lineno}, column {e.colno})", [where]) from None


def _array_problem(doc: dict[str, Any], v3: bool) -> str | None:
    """Why an array document is broken, or None."""
    required = _V3_ARRAY if v3 else _V2_ARRAY
    for key, kind in required.items():
        if key not in doc:
            return f"field {key!r} is missing"
        if not isinstance(doc[key], kind):
            return f"field {key!r} is {type(doc[key]).__name__}, not {getattr(kind, '__name__', 'str or object')}"
    if "fill_value" not in doc:
        return "field 'fill_value' is missing"
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in doc["shape"]):
        return f"shape {doc['shape']} is not a list of integers >= 0"
    why = _chunking_problem(doc, v3)
    if why is not None:
        return why
    try:
        if v3:
            from zarr.core.dtype import get_data_type_from_json

            get_data_type_from_json(doc["data_type"], zarr_format=3)
        else:
            import numpy as np

            np.dtype(doc["dtype"] if isinstance(doc["dtype"], str) else [tuple(f) for f in doc["dtype"]])
    except (ValueError, TypeError, KeyError) as e:
        return f"data type {doc.get('data_type', doc.get('dtype'))!r}: {e}"
    return None


def _positive_ints(value: object, ndim: int) -> TypeGuard[list[int]]:
    return (isinstance(value, list) and len(value) == ndim
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in value))


def _chunking_problem(doc: dict[str, Any], v3: bool) -> str | None:
    """Chunk shapes that are not ``ndim`` integers >= 1 (a 0 divided by zero, a negative one gave
    numpy's message), or a chunk grid of more than ``MAX_CHUNKS`` chunks (``2**62`` rows: a
    MemoryError naming nothing)."""
    shape = doc["shape"]
    if v3:
        grid = doc["chunk_grid"]
        if grid.get("name") != "regular":
            return None  # another grid: zarr-python decides
        chunks = (grid.get("configuration") or {}).get("chunk_shape")
        label = "chunk_grid chunk_shape"
        inner = [c.get("configuration", {}).get("chunk_shape") for c in doc["codecs"]
                 if isinstance(c, dict) and c.get("name") == "sharding_indexed" and isinstance(c.get("configuration"), dict)]
        for one in inner:
            if not _positive_ints(one, len(shape)):
                return f"sharding_indexed chunk_shape {one} is not a list of {len(shape)} integers >= 1"
    else:
        chunks, label = doc["chunks"], "chunks"
    if not _positive_ints(chunks, len(shape)):
        return f"{label} {chunks} is not a list of {len(shape)} integers >= 1"
    count = math.prod(-(-s // c) for s, c in zip(shape, chunks, strict=True))
    if count > MAX_CHUNKS:
        return (f"shape {shape} in chunks of {chunks} is {count:.3g} chunks, more than zopt handles ({MAX_CHUNKS:.0e}; "
                "a corrupt shape?)")
    return None


def _documents(store: str) -> list[str]:
    """Relative paths (``/``-separated) of the store's metadata documents, sorted; zopt's own
    ``.zopt-*`` directories (journal, lock, job files) left out. Local stores are walked without
    a ``stat`` per chunk file."""
    if loc.is_url(store):
        return [p for p, _ in loc.files(store) if p.rsplit("/", 1)[-1] in _DOCS and ".zopt-" not in p]
    import os

    root = loc.local_path(store)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".zopt-")]
        for d in dirnames:  # os.walk does not follow links; zarr does, into ``loop/loop/…`` without end
            link = os.path.join(dirpath, d)
            if os.path.islink(link):
                target, here = os.path.realpath(link), os.path.realpath(dirpath)
                if here == target or here.startswith(target.rstrip(os.sep) + os.sep):
                    raise BrokenMetadataError(f"{link}: a symbolic link to {target}, which holds the link: a loop that "
                                              "zarr would follow without end; remove the link", [link])
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        out += [n if rel == "." else f"{rel}/{n}" for n in filenames if n in _DOCS]
    return sorted(out)


def check_store(store: str, skip_broken: bool = False) -> list[str]:
    """Check every metadata document of the Zarr store ``store`` (see the module docstring).
    Returns the hierarchy paths of the broken arrays skipped (``[]`` unless ``skip_broken``).
    Raises ``BrokenMetadataError`` naming the files."""
    broken: list[tuple[str, str, str]] = []  # (array path, file, why)
    fatal: list[tuple[str, str, str]] = []  # broken, and not skippable
    for rel in _documents(store):
        where = loc.join(store, *rel.split("/"))
        doc = load_json(loc.read_bytes(where), where)
        name = rel.rsplit("/", 1)[-1]
        node = rel[: -len(name)].rstrip("/")
        if name in (".zattrs", ".zmetadata", ".zgroup") or (name == "zarr.json" and isinstance(doc, dict)
                                                          and doc.get("node_type") == "group"):
            if not isinstance(doc, dict):
                raise BrokenMetadataError(f"{where}: holds {type(doc).__name__}, not a JSON object", [where])
            continue
        if not isinstance(doc, dict):
            why: str | None = f"holds {type(doc).__name__}, not a JSON object"
        elif name == "zarr.json" and (doc.get("zarr_format") != 3 or doc.get("node_type") != "array"):
            why = f"zarr_format {doc.get('zarr_format')!r} / node_type {doc.get('node_type')!r} is not 3 / group or array"
        else:
            why = _array_problem(doc, name == "zarr.json")
        if why is not None:
            skippable = node != "" and why.startswith("field") and why.endswith("is missing")
            (broken if skippable else fatal).append((node, where, why))
    if fatal and skip_broken:
        raise BrokenMetadataError(
            "broken array metadata that cannot be skipped (zarr-python fails on the group holding it, or it is the "
            "root): " + "; ".join(f"{w}: {why}" for _, w, why in fatal) + "; fix or remove it", [w for _, w, _ in fatal])
    if (broken or fatal) and not skip_broken:
        bad = broken + fatal
        raise BrokenMetadataError(
            "broken array metadata: " + "; ".join(f"{w}: {why}" for _, w, why in bad)
            + " (fix or remove it" + (", or give --skip-broken to leave the array out)" if not fatal else ")"),
            [w for _, w, _ in bad])
    return [n for n, _, _ in broken]
