"""Many sources, one store: files combined along one dimension, checked before anything is written.

``open_multi(src, concat_dim)`` takes a glob (``"archive/*.nc"``), a list of paths or URLs (each may
be a glob), and returns a ``MultiSource``: the files combined along ``concat_dim`` as
``xarray.open_mfdataset(..., combine="by_coords")`` would (ordered by their first coordinate value,
``combine="nested"`` order, the order given, when the files have no coordinate variable for it),
or, with ``combine="nested"``, in the order given (a glob sorted by name) whatever their
coordinate values, as ``open_mfdataset(..., combine="nested")`` would,
with these checks, each refused with one line naming the file (ValueError, nothing written):

- a pattern that matches no file;
- the same variables, dimensions, data types, fill values, attributes and sizes on the other
  dimensions in every file, and the same values for the variables without ``concat_dim``;
- a strictly increasing ``concat_dim`` coordinate inside each file and no overlap between files (a
  gap, a step more than 1.5 times the typical one, is a note); not with ``combine="nested"``.

Per-file metadata is read by Dask tasks (one per ``BATCH`` files, on the workers of a cluster),
each returning a compact summary: the client keeps one schema and a few numbers per file, so
10^4–10^5 files fit in bounded client memory.

While a recompress job runs its ``before_publish`` hook (``job_source``), ``open_multi`` of the same
files along the same dimension returns the job's ``MultiSource`` instead of summarising every file
again (``recompress --verify --concat-dim``), provided each file's path, size, modification time
and sampled bytes (``zopt.store.identity``) are still those the job summarised (checked by Dask
tasks, one per ``BATCH`` files); a changed file is summarised again.

CF packing (``scale_factor``/``add_offset``): files packed the same way keep their integers and
attributes byte for byte; files packed differently are re-expressed in one exact ``scale_offset``
+ ``cast_value`` packing, or refused naming two files (``zopt.io.packing``). netCDF files are
opened with netCDF4 directly (``zopt.io.files``).
"""

from __future__ import annotations

import bisect
import contextlib
import glob as globmod
import hashlib
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from zopt.compat.job_cache import release_job
from zopt.errors import OptionError
from zopt.io import locations as loc
from zopt.io.files import file_variables, read_file
from zopt.io.packing import PACKING, UNPACKED, Repack, decimal, repack
from zopt.io.source_kinds import CombinedSource, Source, SourceIdentity, SourceVariable
from zopt.io.sources import (
    child_groups,
    is_zarr,
    open_dataset,
    source_identity,
)
from zopt.notes import Note
from zopt.store.identity import content_sample, files_table
from zopt.types import SourceLike

__all__ = ["BATCH", "MultiSource", "along_concat_dim", "expand_sources", "job_source", "open_multi"]

BATCH = 64  # files per summary task
_MAX_GAP_NOTES = 5
#: the MultiSource of the recompress job whose before_publish hook runs (``job_source``)
_JOB_SOURCE: ContextVar[MultiSource | None] = ContextVar("zopt_job_source", default=None)


def expand_sources(src: SourceLike) -> list[str]:
    """The files of ``src`` (a glob, a path, or a list of them; local or fsspec URLs), each glob
    sorted by name; local paths made absolute. ValueError naming a pattern that matches nothing."""
    items = [src] if isinstance(src, str | os.PathLike) else list(src)
    if not items:
        raise OptionError("src", "an empty list of sources")
    out: list[str] = []
    for item in items:
        text = os.fspath(item)
        if not any(c in text for c in "*?["):
            if not loc.exists(text):
                raise FileNotFoundError(f"src: {text!r} does not exist")
            out.append(text if loc.is_url(text) else os.path.abspath(loc.local_path(text)))
            continue
        if loc.is_url(text):  # listed through the store (zopt.io.locations.glob)
            found = loc.glob(text)
        else:
            found = sorted(os.path.abspath(p) for p in globmod.glob(loc.local_path(text)))
            for p in found:  # refused, not skipped: a file the user meant may be missing from the archive
                if not os.path.exists(p):
                    raise OptionError("src", f"{text!r} matches {p}, a symbolic link to {os.readlink(p)!r}, which does "
                                     "not exist: fix or remove the link, or give a pattern that leaves it out")
                if os.path.isdir(p) and not is_zarr(p):
                    raise OptionError("src", f"{text!r} matches {p}, a directory that is not a Zarr store: give a "
                                     "pattern that matches only the files (or Zarr stores) to combine")
        if not found:
            raise OptionError("src", f"{text!r} matches no file")
        out.extend(found)
    return out


@dataclass(frozen=True)
class FilesFound:
    """What summarizing the files found (``open_multi``): the first file's variables ``schema``
    (``{name: {dims, dtype, shape, attrs}}``), the combined coordinate values ``coord`` (or None),
    the variables packed differently ``repacks`` (``{variable: Repack}``), ``identity`` (a digest of
    every file's path, size, modification time and sampled bytes), the files' bytes ``nbytes`` and
    the ``notes`` (gaps and re-expressions)."""

    schema: dict[str, Any]
    coord: np.ndarray | None
    repacks: dict[str, Repack]
    identity: str
    nbytes: int
    notes: list[Note]


class MultiSource(CombinedSource):
    """Files combined along ``dim`` (see the module docstring), a ``zopt.io.source_kinds.Source``
    (``open_source(src, concat_dim=…)`` makes one). Plain class, not a dataclass, so Dask never
    walks its fields when it is a task argument.

    files : the files in combined order; starts : each file's first index along ``dim``; found :
    what summarizing them found (``FilesFound``: schema, coord, repacks, identity, nbytes, notes,
    kept as attributes of those names); table : the per-file identities
    (``zopt.store.identity.files_table``); combine : ``"by_coords"`` or ``"nested"`` (see ``open_multi``)."""

    def __init__(self, files: list[str], dim: str, starts: list[int], found: FilesFound,
                 combine: str = "by_coords") -> None:
        self.files, self.dim, self.starts, self.combine = tuple(files), dim, tuple(starts), combine
        self.schema, self.coord, self.repacks = found.schema, found.coord, found.repacks
        self.identity, self.nbytes, self.notes = found.identity, found.nbytes, found.notes
        self.table: str | None = None  # zopt.store.identity.files_table: a refused resume names the files that changed
        self.length = starts[-1]
        self.text = f"{len(self.files)} files along {dim!r} ({self.files[0]} … {self.files[-1]})"

    def __repr__(self) -> str:
        return f"MultiSource({self.text})"

    @classmethod
    def claims(cls, src: object, concat_dim: str | None) -> bool:
        return concat_dim is not None

    @classmethod
    def open(cls, src: SourceLike, concat_dim: str | None, combine: str, scheduler: str | None) -> MultiSource:
        assert concat_dim is not None  # claims
        return open_multi(src, concat_dim, scheduler, combine)

    @property
    def concat_dim(self) -> str:
        return self.dim

    def total_bytes(self) -> int:
        return self.nbytes

    def identify(self, names: Sequence[str]) -> SourceIdentity:
        """Every file's path, size, modification time and sampled bytes, and the table naming them."""
        return SourceIdentity(self.text, self.identity, self.table)

    def variables(self, job_id: str | None = None) -> dict[str, SourceVariable]:
        out = {}
        for name, e in self.schema.items():
            dims = tuple(e["dims"])
            shape = _full_shape(dims, e["shape"], self.dim, self.length)
            dtype = np.dtype(self.repacks[name].dtype) if name in self.repacks else np.dtype(e["dtype"])
            out[name] = SourceVariable(shape, dtype, dims)
        return out

    def read(self, name: str, region: tuple[slice, ...], job_id: str | None = None) -> np.ndarray:
        """The values of ``region`` of ``name``: from the files it covers along ``dim`` (re-expressed
        for a repacked variable), from the first file for a variable without ``dim``."""
        dims = tuple(self.schema[name]["dims"])
        if name == self.dim and self.coord is not None and name not in self.repacks:  # read by the summaries
            return np.asarray(self.coord[region])
        if self.dim not in dims:
            return read_file(self.files[0], name, region, job_id)
        axis = dims.index(self.dim)
        lo, hi = region[axis].start or 0, region[axis].stop
        hi = self.length if hi is None else hi
        parts = []
        first = bisect.bisect_right(self.starts, lo) - 1
        for i in range(first, len(self.files)):
            a, b = self.starts[i], self.starts[i + 1]
            if a >= hi:
                break
            sub = list(region)
            sub[axis] = slice(max(lo, a) - a, min(hi, b) - a)
            values = read_file(self.files[i], name, tuple(sub), job_id)
            if name in self.repacks:
                values = self.repacks[name].decode(i, values)
            parts.append(values)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)

    def template(self, job_id: str | None = None) -> xr.Dataset:
        """The combined dataset, lazy: the first file's variables without ``dim`` and attributes, each
        variable along ``dim`` a ``dask.array.empty`` of the combined shape (the coordinate with its
        values); a repacked variable as its float type without the packing attributes."""
        import dask.array as da

        first = open_dataset(self.files[0], job_id)
        out = xr.Dataset(attrs=dict(first.attrs))
        for name, var in first.variables.items():
            if self.dim not in var.dims:
                out[name] = var
                continue
            sv = self.variables()[str(name)]
            attrs = dict(var.attrs)
            if name in self.repacks:
                attrs = {k: v for k, v in attrs.items() if k not in (*PACKING, "_FillValue", "missing_value")}
            if name == self.dim and self.coord is not None:
                data = np.asarray(self.coord, dtype=sv.dtype)
            else:
                data = da.empty(sv.shape, dtype=sv.dtype, chunks=sv.shape or ())
            out[name] = xr.Variable(var.dims, data, attrs)
        return out.set_coords([c for c in first.coords if c in out.variables])


def _full_shape(dims: tuple[str, ...], other: list[int], dim: str, length: int) -> tuple[int, ...]:
    it = iter(other)
    return tuple(length if d == dim else next(it) for d in dims)


# -- summaries: read by Dask tasks ------------------------------------------------------------


def _jsonable(value: object) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    return str(value) if not isinstance(value, str | int | float | bool | list | dict | type(None)) else value


def _check_number(path: str, name: str, key: str, attrs: dict[str, Any]) -> None:
    """ValueError naming the file, variable and attribute when a packing attribute is not one number."""
    if key not in attrs:
        return
    value = np.asarray(attrs[key])
    if value.dtype.kind not in "iuf" or value.size != 1:
        raise OptionError("src", f"{path}: variable {name!r}: attribute {key!r} is {_plain(value.ravel()[0]) if value.size else '[]'} "
                         f"({value.dtype.name if value.dtype.kind != 'U' else 'a string'}), not one number: "
                         "CF packing needs a number; fix the attribute first")


def _summary(path: str, dim: str, job_id: str) -> tuple[str, str, int, Any, dict[str, tuple[Any, ...]]]:
    """``(schema key, schema JSON, length along dim, coordinate values or None, {variable: packing})``
    of one file (a packing: ``(scale, offset, float type, min, max, fill)``, ``zopt.io.packing``)."""
    variables, sizes = file_variables(path, job_id)
    if dim not in sizes:
        raise OptionError("src", f"{path} has no dimension {dim!r} (concat_dim); it has {sorted(sizes)}")
    schema: dict[str, Any] = {}
    packing: dict[str, tuple[Any, ...]] = {}
    for name, (dims, dtype, shape, all_attrs, read) in variables.items():
        attrs = {k: x for k, x in all_attrs.items() if k not in PACKING}
        entry = {"dims": list(dims), "dtype": dtype.str,
                 "shape": [int(s) for d, s in zip(dims, shape, strict=True) if d != dim],
                 "attrs": json.loads(json.dumps(attrs, default=_jsonable, sort_keys=True))}
        values = None
        if dim not in dims:  # must be the same in every file
            values = np.ascontiguousarray(read())
            raw = values.tobytes() if values.dtype.kind != "O" else repr(values.tolist()).encode()
            entry["values"] = hashlib.blake2b(raw, digest_size=16).hexdigest()
        if any(k in all_attrs for k in PACKING):
            for k in (*PACKING, "_FillValue"):
                _check_number(path, name, k, all_attrs)
            values = read() if values is None else values
            fill = all_attrs.get("_FillValue")
            valid = values[values != fill] if fill is not None else values.ravel()
            scale, offset = all_attrs.get("scale_factor", 1.0), all_attrs.get("add_offset", 0.0)
            float_type = np.result_type(np.asarray(scale).dtype, np.asarray(offset).dtype, np.float32).str
            packing[name] = (decimal(scale), decimal(offset), float_type,
                             int(valid.min()) if valid.size else None, int(valid.max()) if valid.size else None,
                             None if fill is None else int(np.asarray(fill).item()))
        schema[name] = entry
    key = hashlib.blake2b(json.dumps(schema, sort_keys=True).encode(), digest_size=16).hexdigest()
    coord = np.asarray(variables[dim][4]()).ravel() if dim in variables else None
    return key, json.dumps(schema), int(sizes[dim]), coord, packing  # json: the file's variable order


def _summarize_batch(paths: list[str], dim: str, job_id: str) -> dict[str, Any]:
    """The summaries of ``paths``, columnar: each distinct schema once, per file a schema index, a
    length, its coordinate values (one array for the batch), its packing if any; one digest of
    the batch's paths, sizes, modification times and sampled bytes, and one per file; its bytes."""
    keys: list[str] = []
    schemas: dict[str, str] = {}
    kind, n, coords, has_coord, packing, ids = [], [], [], [], {}, []
    h = hashlib.blake2b(digest_size=16)
    nbytes = 0
    try:
        for i, path in enumerate(paths):
            key, text, length, coord, packs = _summary(path, dim, job_id)
            if key not in schemas:
                schemas[key] = text
                keys.append(key)
            kind.append(keys.index(key))
            n.append(length)
            has_coord.append(coord is not None)
            coords.append(coord if coord is not None else np.zeros(length))
            if packs:
                packing[i] = packs
            line = _identity_line(path)
            h.update(line)
            ids.append(hashlib.blake2b(line, digest_size=8).hexdigest())
            nbytes += loc.total_bytes(path)
    finally:
        release_job(job_id)
    return {"keys": keys, "schemas": schemas, "kind": np.array(kind, np.int32), "n": np.array(n, np.int64),
            "coords": np.concatenate(coords) if coords else np.zeros(0), "has_coord": np.array(has_coord),
            "packing": packing, "identity": h.hexdigest(), "ids": ids, "bytes": nbytes}


def _identity_line(path: str) -> bytes:
    """What the identity digest takes of one file: its path, size, modification time and, for a
    local file, a sample of its bytes (``zopt.store.identity.content_sample``), for a file on an
    object store its ETag and version where the store gives them (``zopt.io.locations.identity``)."""
    if loc.is_url(path):
        try:
            remote = loc.identity(path)
        except (FileNotFoundError, IsADirectoryError):  # a Zarr store's prefix: no one object
            remote = ""
        return f"{path}\0{remote}\0\0".encode()
    sample = content_sample(path) if os.path.isfile(path) else ""
    return f"{path}\0{source_identity(path)!r}\0{sample}\0".encode()


def _identify_batch(paths: list[str]) -> str:
    """Dask task: the identity digest of a batch of files, as ``_summarize_batch`` makes it."""
    h = hashlib.blake2b(digest_size=16)
    for path in paths:
        h.update(_identity_line(path))
    return h.hexdigest()


# -- the client: combine and check ------------------------------------------------------------


class _Summaries:
    """Every file's summary, columnar (numpy arrays; schemas and packings by file index)."""

    def __init__(self, batches: list[dict[str, Any]]) -> None:
        self.schemas: dict[str, str] = {}
        keys: list[str] = []
        kinds, packing, h = [], {}, hashlib.blake2b(digest_size=16)
        base = 0
        for b in batches:
            for k in b["keys"]:
                self.schemas.setdefault(k, b["schemas"][k])
                if k not in keys:
                    keys.append(k)
            kinds.append(np.array([keys.index(k) for k in b["keys"]], np.int32)[b["kind"]])
            packing.update({base + i: p for i, p in b["packing"].items()})
            h.update(b["identity"].encode())
            base += len(b["n"])
        self.keys, self.packing, self.identity = keys, packing, h.hexdigest()
        self.ids = [i for b in batches for i in b["ids"]]  # per file, in the order given
        self.kind = np.concatenate(kinds)
        self.n = np.concatenate([b["n"] for b in batches])
        self.coords = np.concatenate([b["coords"] for b in batches])
        self.has_coord = bool(all(b["has_coord"].all() for b in batches))
        self.offsets = np.concatenate([[0], np.cumsum(self.n)])
        self.nbytes = sum(b["bytes"] for b in batches)

    def coord(self, i: int) -> np.ndarray:
        return self.coords[self.offsets[i]:self.offsets[i + 1]]


COMBINE = ("by_coords", "nested")


def check_combine(combine: object) -> None:
    """ValueError naming ``combine`` and the allowed values."""
    if combine not in COMBINE:
        raise OptionError("combine", f"{combine!r} is not one of {list(COMBINE)}")


def check_combine_use(combine: object, concat_dim: str | None) -> None:
    """ValueError naming ``combine``: a value other than ``"by_coords"``/``"nested"``, or
    ``"nested"`` without ``concat_dim`` (it orders several sources), as ``RecompressJob`` refuses."""
    if concat_dim is None:
        if combine != "by_coords":
            raise OptionError("combine", f"{combine!r} orders several sources; it needs concat_dim")
        return
    check_combine(combine)


def open_multi(src: SourceLike, concat_dim: str, scheduler: str | None = None, combine: str = "by_coords") -> MultiSource:
    """``src`` (a glob, a path or URL, or a list of them) combined along ``concat_dim``; see the module
    docstring for the checks (ValueError naming the file and what differs; FileNotFoundError).

    combine : ``"by_coords"`` (files ordered by their ``concat_dim`` coordinate, which must not
    overlap) or ``"nested"`` (the order given, a glob sorted by name; no coordinate checks), as
    ``xarray.open_mfdataset``'s ``combine``."""
    import dask

    from zopt.compat.scheduling import compute

    if not isinstance(concat_dim, str) or not concat_dim:
        raise OptionError("concat_dim", f"{concat_dim!r} is not a dimension name")
    check_combine(combine)
    files = expand_sources(src)
    job = _JOB_SOURCE.get()
    same_files = job is not None and (list(job.files) == files if combine == "nested" else sorted(job.files) == sorted(files))
    if job is not None and job.dim == concat_dim and job.combine == combine and same_files \
            and _identity(files, scheduler) == job.identity:
        return job  # the running job's summaries: the same files, unchanged since
    groups = child_groups(files[0])
    if groups:
        raise OptionError("src", f"{files[0]} has groups {groups}, which combining files would drop: "
                         "give files without groups")
    job_id = f"summary-{uuid.uuid4().hex[:12]}"
    tasks = [dask.delayed(_summarize_batch, pure=False)(files[i:i + BATCH], concat_dim, job_id)
             for i in range(0, len(files), BATCH)]
    try:
        s = _Summaries(compute(tasks, scheduler, None, job_id))
    finally:
        release_job(job_id)
    first = int(np.flatnonzero(s.kind != 0)[0]) if (s.kind != 0).any() else None
    if first is not None:
        a, b = json.loads(s.schemas[s.keys[0]]), json.loads(s.schemas[s.keys[s.kind[first]]])
        raise OptionError("src", f"{files[first]} differs from {files[0]}: {_difference(a, b)}")
    if combine == "nested":
        order, notes = np.arange(len(files)), [Note(f"files combined along {concat_dim!r} in the order given "
                                                    "(combine='nested')", "source")]
    else:
        order, notes = _order(files, s, concat_dim)
    repacks = {}
    for name in sorted({n for p in s.packing.values() for n in p}):
        packs = [s.packing.get(int(i), {}).get(name, UNPACKED) for i in order]
        found = repack(name, [files[i] for i in order], packs)
        if found is not None:
            repacks[name] = found
            notes.append(Note(f"{name}: files packed differently, re-expressed as one exact packing (scale_offset "
                              f"offset={found.offset!r}, scale={found.scale!r}; cast_value {found.int_dtype})",
                              "repacked", name))
    coord = np.concatenate([s.coord(int(i)) for i in order]) if s.has_coord else None
    out = MultiSource([files[i] for i in order], concat_dim, np.concatenate([[0], np.cumsum(s.n[order])]).tolist(),
                      FilesFound(json.loads(s.schemas[s.keys[0]]), coord, repacks, s.identity, s.nbytes, notes), combine)
    out.table = files_table(dict(zip(files, s.ids, strict=True)))
    return out


def _identity(files: list[str], scheduler: str | None) -> str:
    """The identity digest of ``files`` (in this order) that ``open_multi`` records, from their
    paths, sizes, modification times and sampled bytes only (Dask tasks, one per ``BATCH`` files)."""
    import dask

    from zopt.compat.scheduling import compute

    job_id = f"identity-{uuid.uuid4().hex[:12]}"
    tasks = [dask.delayed(_identify_batch, pure=False)(files[i:i + BATCH]) for i in range(0, len(files), BATCH)]
    h = hashlib.blake2b(digest_size=16)
    for digest in compute(tasks, scheduler, None, job_id):
        h.update(digest.encode())
    return h.hexdigest()


@contextlib.contextmanager
def job_source(src: Source) -> Iterator[None]:
    """While a recompress job's ``before_publish`` hook runs: ``open_multi`` of the job's files
    (``src``, several files: a ``MultiSource``; one path does nothing) returns it when they are unchanged."""
    if src.concat_dim is None or not isinstance(src, MultiSource):
        yield
        return
    token = _JOB_SOURCE.set(src)
    try:
        yield
    finally:
        _JOB_SOURCE.reset(token)


def _difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What differs between two schemas, in words (the first difference)."""
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        return "; ".join(x for x in (f"variables {only_b} only there" if only_b else "",
                                     f"variables {only_a} missing there" if only_a else "") if x)
    for name in a:
        x, y = a[name], b[name]
        for key, what in (("dims", "dimensions"), ("dtype", "data type"), ("shape", "sizes on the other dimensions")):
            if x[key] != y[key]:
                return f"variable {name!r}: {what} {y[key]} there, {x[key]} here"
        if x["attrs"] != y["attrs"]:
            for k in sorted(set(x["attrs"]) | set(y["attrs"])):  # as JSON text: NaN equals NaN
                if json.dumps(x["attrs"].get(k)) != json.dumps(y["attrs"].get(k)):
                    what = "fill value" if k in ("_FillValue", "missing_value") else f"attribute {k!r}"
                    return f"variable {name!r}: {what} {y['attrs'].get(k)!r} there, {x['attrs'].get(k)!r} here"
        if x.get("values") != y.get("values"):
            return f"variable {name!r} (without the concat dimension) has other values there"
    return "the variables differ"


def _plain(value: object) -> str:
    """A coordinate value as a user wrote it: ``0.0``, not ``np.float64(0.0)``."""
    return repr(value.item()) if isinstance(value, np.generic) else repr(value)


def _order(files: list[str], s: _Summaries, dim: str) -> tuple[np.ndarray, list[Note]]:
    """The files in combined order (by first coordinate value), the coordinate checked; gap notes."""
    if not s.has_coord:
        return np.arange(len(files)), [Note(f"no {dim!r} coordinate: files combined in the order given", "source")]
    nan = np.flatnonzero(np.isnan(s.coords)) if s.coords.dtype.kind in "fc" else np.zeros(0, int)
    if nan.size:  # a NaN orders nowhere: sorted last, its file's data would move to the end
        j = int(nan[0])
        i = int(np.searchsorted(s.offsets, j, side="right") - 1)
        raise OptionError("src", f"{files[i]}: coordinate {dim!r} is NaN at index {j - s.offsets[i]}, so it cannot "
                         "order the files (give them in the order you choose with combine='nested', --combine nested)")
    steps = np.diff(s.coords)
    inside = np.ones(steps.shape, bool)  # the steps between two values of one file
    inside[s.offsets[1:-1][s.offsets[1:-1] > 0] - 1] = False
    bad = np.flatnonzero(inside & ~(steps > 0))
    if bad.size:
        j = int(bad[0])
        i = int(np.searchsorted(s.offsets, j, side="right") - 1)
        raise OptionError("src", f"{files[i]}: coordinate {dim!r} is not increasing inside the file "
                         f"({s.coords[j]!r} then {s.coords[j + 1]!r} at index {j + 1 - s.offsets[i]})")
    full = np.flatnonzero(s.n > 0)
    firsts, lasts = s.coords[s.offsets[full]], s.coords[s.offsets[full + 1] - 1]
    rank = np.argsort(firsts, kind="stable")
    order, firsts, lasts = full[rank], firsts[rank], lasts[rank]
    between = firsts[1:] - lasts[:-1]
    for j in np.flatnonzero(between <= 0)[:1]:
        a, b = files[order[j]], files[order[j + 1]]
        same = bool(np.all(firsts == firsts[0]) and np.all(lasts == lasts[0]))
        hint = (f"; every file has the same {dim!r} values, so they cannot order the files (give them in "
                "the order you choose with combine='nested', --combine nested)" if same else "")
        raise OptionError("src", f"{b} overlaps {a} along {dim!r}: it starts at {_plain(firsts[j + 1])}, "
                         f"{a} ends at {_plain(lasts[j])}{hint}")
    typical = np.median(steps[inside]) if inside.any() else (np.median(between) if between.size else 0)
    notes: list[Note] = []
    gaps = np.flatnonzero(between > 1.5 * typical) if typical else np.zeros(0, int)
    for j in gaps[:_MAX_GAP_NOTES]:
        notes.append(Note(f"gap along {dim!r}: {files[order[j]]} ends at {lasts[j]!r}, {files[order[j + 1]]} starts "
                          f"at {firsts[j + 1]!r} (typical step {typical!r})", "source"))
    if len(gaps) > _MAX_GAP_NOTES:
        notes.append(Note(f"… and {len(gaps) - _MAX_GAP_NOTES} more gaps along {dim!r}", "source"))
    return np.concatenate([order, np.flatnonzero(s.n == 0)]), notes


# -- for the job: a source that may be several files ------------------------------------------


def along_concat_dim(src: Source, source: dict[str, SourceVariable], names: list[str],
                     notes: list[Note]) -> list[str]:
    """``names`` and every other variable along the concat dimension of several files: the tasks
    write them all (no single file holds one); the numeric ones not asked for are added (a note),
    any other is refused naming it (ValueError). One path: ``names``."""
    dim = src.concat_dim
    if dim is None:
        return names
    along = [n for n, v in source.items() if dim in v.dims and n not in names]
    other = [n for n in along if source[n].dtype.kind not in "biufc"]
    if other:
        raise OptionError("src", f"variables {other} along {dim!r} are not numeric; combining several files "
                         "writes every variable along the concat dimension through zopt: drop them first")
    if along:
        notes.append(Note(f"variables: {along} are along {dim!r} and are combined from every file too", "source"))
    return names + along
