"""Many sources, one store: files combined along one dimension, checked before anything is written.

``open_multi(src, concat_dim)`` takes a glob (``"archive/*.nc"``), a list of paths or URLs (each may
be a glob), and returns a ``MultiSource``: the files combined along ``concat_dim`` as
``xarray.open_mfdataset(..., combine="by_coords")`` would (ordered by their first coordinate value,
``combine="nested"`` order, the order given, when the files have no coordinate variable for it),
with these checks, each refused with one line naming the file (ValueError, nothing written):

- a pattern that matches no file;
- the same variables, dimensions, data types, fill values, attributes and sizes on the other
  dimensions in every file, and the same values for the variables without ``concat_dim``;
- a strictly increasing ``concat_dim`` coordinate inside each file and no overlap between files (a
  gap, a step more than 1.5 times the typical one, is a note).

Per-file metadata is read by Dask tasks (one per ``BATCH`` files, on the workers of a cluster),
each returning a compact summary: the client keeps one schema and a few numbers per file, so
10^4–10^5 files fit in bounded client memory.

CF packing (``scale_factor``/``add_offset``): files packed the same way keep their integers and
attributes byte for byte. Files packed differently are re-expressed as one exact packing
``q = k_i * p + m_i`` (integers ``k_i``, ``m_i`` per file; ``1/b`` the greatest common divisor of
every scale factor and offset difference, taken as the decimals the attributes' floats stand for:
``0.01``, ``273.15``) stored through ``scale_offset`` (``offset`` O, ``scale`` b, an integer) +
``cast_value`` (an integer type holding every ``q`` of every file, from the files' actual value
ranges, NaN ↔ a reserved integer): the array becomes the unpacked float type, and each value
read is the chain's own decoding of ``q``, so the stored integers round-trip bit for bit. When
no such packing exists (the integers would not fit in 64 bits, or in the float type's mantissa)
the job is refused naming the two files. The decoded floats ``q / b + O`` equal each file's
``p * s_i + o_i`` in those decimals; as floats, each is rounded its own way, so they can differ
from a file's own CF decoding in the last place (one ulp).
Spec: ``/work/shared/specs/scale_offset_cast_value.md``.
"""

from __future__ import annotations

import bisect
import collections
import glob as globmod
import hashlib
import json
import math
import os
import threading
import uuid
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import xarray as xr

from zopt.io import locations as loc
from zopt.io.sources import (
    CombinedSource,
    SourceVariable,
    child_groups,
    on_release,
    open_source,
    read_source,
    release,
    source_identity,
)

__all__ = ["BATCH", "MultiSource", "Repack", "expand_sources", "open_multi"]

BATCH = 64  # files per summary task
_PACKING = ("scale_factor", "add_offset")
_INTS = (np.int8, np.int16, np.int32, np.int64)
_MAX_GAP_NOTES = 5
_MAX_NC = 32  # netCDF4 handles kept open per process (~0.7 MB each: HDF5's caches)
_nc: collections.OrderedDict[tuple[str, str | None], Any] = collections.OrderedDict()
_nc_guard = threading.Lock()  # the cache itself


def _hdf5_lock() -> Any:
    """xarray's lock around the HDF5 library (not thread-safe): our netCDF4 calls take the same one."""
    from xarray.backends.locks import HDF5_LOCK

    return HDF5_LOCK


def _nc_handle(path: str, token: str | None) -> Any:
    """A local netCDF4/HDF5 file opened with netCDF4 (no scaling, no masking), kept per ``(path,
    token)``; None for anything else (Zarr stores, URLs, netCDF4 missing or refusing the file).
    netCDF4 directly opens a file about 6× faster than ``xarray.open_dataset`` (the summaries
    and reads of 10^4 files are mostly opens). Call with the HDF5 lock held."""
    key = (path, token)
    with _nc_guard:
        if key in _nc:
            _nc.move_to_end(key)
            return _nc[key]
    if loc.is_url(path) or not os.path.isfile(path):
        return None
    try:
        import netCDF4

        nc = netCDF4.Dataset(path, "r")
    except (ImportError, OSError):
        return None
    nc.set_auto_maskandscale(False)
    with _nc_guard:
        _nc[key] = nc
        while len(_nc) > _MAX_NC:
            _nc.popitem(last=False)[1].close()
    return nc


@on_release
def _close(token: str | None) -> int:
    with _nc_guard:
        closing = [_nc.pop(k) for k in [k for k in _nc if k[1] == token]]
    with _hdf5_lock():
        for nc in closing:
            nc.close()
    return len(closing)


def _read_file(path: str, name: str, region: tuple[slice, ...], token: str | None) -> np.ndarray:
    """``region`` of variable ``name`` of one file, as stored (netCDF4 directly, else ``read_source``)."""
    with _hdf5_lock():
        nc = _nc_handle(path, token)
        if nc is not None:
            return np.asarray(nc.variables[name][region if region else ...])
    return np.asarray(read_source(path, name, region, token))


def _file_variables(path: str, token: str) -> tuple[dict[str, tuple], dict[str, int]]:
    """``({name: (dims, dtype, shape, attrs, read)}, {dim: size})`` of one file, as xarray's
    ``decode_cf=False`` view gives them (netCDF4 directly when it can)."""
    with _hdf5_lock():
        nc = _nc_handle(path, token)
        if nc is not None:
            out = {}
            for name, v in nc.variables.items():
                dtype = np.dtype(object) if v.dtype is str else np.dtype(v.dtype)
                attrs = {k: v.getncattr(k) for k in v.ncattrs()}
                out[name] = (tuple(v.dimensions), dtype, tuple(v.shape), attrs,
                             lambda name=name: _read_file(path, name, (), token))
            return out, {d: len(x) for d, x in nc.dimensions.items()}
    ds = open_source(path, token)
    return ({str(n): (tuple(map(str, v.dims)), v.dtype, tuple(v.shape), dict(v.attrs), lambda v=v: np.asarray(v.values))
             for n, v in ds.variables.items()}, {str(d): int(n) for d, n in ds.sizes.items()})


def expand_sources(src: Any) -> list[str]:
    """The files of ``src`` (a glob, a path, or a list of them; local or fsspec URLs), each glob
    sorted by name; local paths made absolute. ValueError naming a pattern that matches nothing."""
    items = [src] if isinstance(src, str | os.PathLike) else list(src)
    if not items:
        raise ValueError("src: an empty list of sources")
    out: list[str] = []
    for item in items:
        text = os.fspath(item)
        if not any(c in text for c in "*?["):
            if not loc.exists(text):
                raise FileNotFoundError(f"src: {text!r} does not exist")
            out.append(text if loc.is_url(text) else os.path.abspath(loc.local_path(text)))
            continue
        if loc.is_url(text) and not text.startswith("file://"):
            import fsspec

            fs, path = fsspec.core.url_to_fs(text)
            found = [fs.unstrip_protocol(p) for p in sorted(fs.glob(path))]
        else:
            found = sorted(os.path.abspath(p) for p in globmod.glob(loc.local_path(text)) if os.path.isfile(p))
        if not found:
            raise ValueError(f"src: {text!r} matches no file")
        out.extend(found)
    return out


@dataclass(frozen=True)
class Repack:
    """One variable's files re-expressed in one packing: per file ``q = k * p + m`` (``per_file``:
    ``(k, m, packed fill or None)``), stored as ``dtype`` floats through scale_offset(``offset``,
    ``scale``) + cast_value(``int_dtype``, NaN ↔ ``nan_code``)."""

    dtype: str  # the unpacked float type
    int_dtype: str
    offset: float
    scale: float  # 1/S
    nan_code: int
    per_file: tuple[tuple[int, int, Any], ...]

    def filters(self) -> list[dict[str, Any]]:
        """The two array → array codecs (JSON) before the chain's own."""
        return [
            {"name": "scale_offset", "configuration": {"offset": self.offset, "scale": self.scale}},
            {"name": "cast_value", "configuration": {
                "data_type": self.int_dtype,
                "scalar_map": {"encode": [["NaN", self.nan_code]], "decode": [[self.nan_code, "NaN"]]}}},
        ]

    def decode(self, i: int, packed: np.ndarray) -> np.ndarray:
        """File ``i``'s packed integers as the stored chain decodes them (NaN where the file's fill)."""
        from zopt.codecs.scale_offset import scale_offset_decode

        k, m, fill = self.per_file[i]
        q = packed.astype(np.int64) * k + m
        ft = np.dtype(self.dtype)
        out = scale_offset_decode(q.astype(ft), ft.type(self.offset), ft.type(self.scale))
        if fill is not None:
            out[packed == fill] = np.nan
        return out


class MultiSource(CombinedSource):
    """Files combined along ``dim`` (see the module docstring). Plain class, not a dataclass, so
    Dask never walks its fields when it is a task argument.

    files : the files in combined order; starts : each file's first index along ``dim``;
    schema : the first file's variables ``{name: {dims, dtype, shape, attrs}}``; coord : the
    combined coordinate values (or None); repacks : ``{variable: Repack}``; identity : a digest of
    every file's path, size and modification time; notes : gaps and re-expressions."""

    def __init__(self, files: list[str], dim: str, starts: list[int], schema: dict[str, Any], coord: Any,
                 repacks: dict[str, Repack], identity: str, nbytes: int, notes: list[str]) -> None:
        self.files, self.dim, self.starts = tuple(files), dim, tuple(starts)
        self.schema, self.coord, self.repacks = schema, coord, repacks
        self.identity, self.nbytes, self.notes = identity, nbytes, notes
        self.length = starts[-1]
        self.text = f"{len(self.files)} files along {dim!r} ({self.files[0]} … {self.files[-1]})"

    def __repr__(self) -> str:
        return f"MultiSource({self.text})"

    def variables(self) -> dict[str, SourceVariable]:
        out = {}
        for name, e in self.schema.items():
            dims = tuple(e["dims"])
            shape = _full_shape(dims, e["shape"], self.dim, self.length)
            dtype = np.dtype(self.repacks[name].dtype) if name in self.repacks else np.dtype(e["dtype"])
            out[name] = SourceVariable(shape, dtype, dims)
        return out

    def read(self, name: str, region: tuple[slice, ...], token: str | None) -> np.ndarray:
        """The values of ``region`` of ``name``: from the files it covers along ``dim`` (re-expressed
        for a repacked variable), from the first file for a variable without ``dim``."""
        dims = tuple(self.schema[name]["dims"])
        if name == self.dim and self.coord is not None and name not in self.repacks:  # read by the summaries
            return np.asarray(self.coord[region])
        if self.dim not in dims:
            return _read_file(self.files[0], name, region, token)
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
            values = _read_file(self.files[i], name, tuple(sub), token)
            if name in self.repacks:
                values = self.repacks[name].decode(i, values)
            parts.append(values)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)

    def template(self, token: str | None) -> xr.Dataset:
        """The combined dataset, lazy: the first file's variables without ``dim`` and attributes, each
        variable along ``dim`` a ``dask.array.empty`` of the combined shape (the coordinate with its
        values); a repacked variable as its float type without the packing attributes."""
        import dask.array as da

        first = open_source(self.files[0], token)
        out = xr.Dataset(attrs=dict(first.attrs))
        for name, var in first.variables.items():
            if self.dim not in var.dims:
                out[name] = var
                continue
            sv = self.variables()[str(name)]
            attrs = dict(var.attrs)
            if name in self.repacks:
                attrs = {k: v for k, v in attrs.items() if k not in (*_PACKING, "_FillValue", "missing_value")}
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


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    return str(value) if not isinstance(value, str | int | float | bool | list | dict | type(None)) else value


def _summary(path: str, dim: str, token: str) -> tuple[str, str, dict[str, Any]]:
    """``(schema key, schema JSON, {n, coord, packing, identity, bytes})`` of one file."""
    variables, sizes = _file_variables(path, token)
    if dim not in sizes:
        raise ValueError(f"src: {path} has no dimension {dim!r} (concat_dim); it has {sorted(sizes)}")
    schema: dict[str, Any] = {}
    packing: dict[str, Any] = {}
    for name, (dims, dtype, shape, all_attrs, read) in variables.items():
        attrs = {k: x for k, x in all_attrs.items() if k not in _PACKING}
        entry = {"dims": list(dims), "dtype": dtype.str,
                 "shape": [int(s) for d, s in zip(dims, shape, strict=True) if d != dim],
                 "attrs": json.loads(json.dumps(attrs, default=_jsonable, sort_keys=True))}
        values = None
        if dim not in dims:  # must be the same in every file
            values = np.ascontiguousarray(read())
            raw = values.tobytes() if values.dtype.kind != "O" else repr(values.tolist()).encode()
            entry["values"] = hashlib.blake2b(raw, digest_size=16).hexdigest()
        if any(k in all_attrs for k in _PACKING):
            values = read() if values is None else values
            fill = all_attrs.get("_FillValue")
            valid = values[values != fill] if fill is not None else values.ravel()
            scale, offset = all_attrs.get("scale_factor", 1.0), all_attrs.get("add_offset", 0.0)
            float_type = np.result_type(np.asarray(scale).dtype, np.asarray(offset).dtype, np.float32).str
            packing[str(name)] = (_decimal(scale), _decimal(offset), float_type,
                                  int(valid.min()) if valid.size else None, int(valid.max()) if valid.size else None,
                                  None if fill is None else int(np.asarray(fill).item()))
        schema[name] = entry
    coord = np.asarray(variables[dim][4]()) if dim in variables else None
    key = hashlib.blake2b(json.dumps(schema, sort_keys=True).encode(), digest_size=16).hexdigest()
    text = json.dumps(schema)  # the file's variable order: the combined store keeps it
    ident = source_identity(path)
    nbytes = loc.total_bytes(path)
    return (key, text,
            {"n": int(sizes[dim]), "coord": coord, "packing": packing, "identity": repr(ident), "bytes": nbytes})


def _decimal(x: Any) -> str:
    """The shortest decimal that gives back the attribute's float (``0.01`` for float32 0.01)."""
    x = np.asarray(x).ravel()[0]
    return np.format_float_positional(x, unique=True, trim="-") if np.asarray(x).dtype.kind == "f" else str(int(x))


def _summarize_batch(paths: list[str], dim: str, token: str) -> dict[str, Any]:
    """The summaries of ``paths``: each distinct schema once, then one small record per file."""
    schemas: dict[str, str] = {}
    records = []
    try:
        for path in paths:
            key, text, rec = _summary(path, dim, token)
            schemas.setdefault(key, text)
            rec["key"] = key
            records.append(rec)
    finally:
        release(token)
    return {"schemas": schemas, "records": records}


# -- the client: combine and check ------------------------------------------------------------


def open_multi(src: Any, concat_dim: str, scheduler: str | None = None) -> MultiSource:
    """``src`` (a glob, a path or URL, or a list of them) combined along ``concat_dim``; see the module
    docstring for the checks (ValueError naming the file and what differs; FileNotFoundError)."""
    import dask

    from zopt.compat.scheduling import compute

    if not isinstance(concat_dim, str) or not concat_dim:
        raise ValueError(f"concat_dim: {concat_dim!r} is not a dimension name")
    files = expand_sources(src)
    groups = child_groups(files[0])
    if groups:
        raise ValueError(f"src: {files[0]} has groups {groups}, which combining files would drop: "
                         "give files without groups")
    token = f"summary-{uuid.uuid4().hex[:12]}"
    tasks = [dask.delayed(_summarize_batch, pure=False)(files[i:i + BATCH], concat_dim, token)
             for i in range(0, len(files), BATCH)]
    try:
        batches = compute(tasks, scheduler, None, token)
    finally:
        release(token)
    schemas: dict[str, str] = {}
    records: list[dict[str, Any]] = []
    for b in batches:
        for k, v in b["schemas"].items():
            schemas.setdefault(k, v)
        records.extend(b["records"])
    del batches
    _check_schemas(files, records, schemas)
    order, notes = _order(files, records, concat_dim)
    files = [files[i] for i in order]
    records = [records[i] for i in order]
    schema = json.loads(schemas[records[0]["key"]])
    starts = np.concatenate([[0], np.cumsum([r["n"] for r in records])]).tolist()
    repacks = {}
    for name in sorted({n for r in records for n in r["packing"]}):
        repack = _repack(name, files, records)
        if repack is not None:
            repacks[name] = repack
            notes.append(f"{name}: files packed differently, re-expressed as one exact packing (scale_offset "
                         f"offset={repack.offset!r}, scale={repack.scale!r}; cast_value {repack.int_dtype})")
    h = hashlib.blake2b(digest_size=16)
    for f, r in zip(files, records, strict=True):
        h.update(f"{f}\0{r['identity']}\0".encode())
    coord = None
    if all(r["coord"] is not None for r in records):
        coord = np.concatenate([r["coord"] for r in records])
    return MultiSource(files, concat_dim, starts, schema, coord, repacks, h.hexdigest(),
                       sum(r["bytes"] for r in records), notes)


def _check_schemas(files: list[str], records: list[dict[str, Any]], schemas: dict[str, str]) -> None:
    first = records[0]["key"]
    for f, r in zip(files, records, strict=True):
        if r["key"] != first:
            raise ValueError(f"src: {f} differs from {files[0]}: "
                             f"{_difference(json.loads(schemas[first]), json.loads(schemas[r['key']]))}")


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
            for k in sorted(set(x["attrs"]) | set(y["attrs"])):
                if x["attrs"].get(k) != y["attrs"].get(k):
                    what = "fill value" if k in ("_FillValue", "missing_value") else f"attribute {k!r}"
                    return f"variable {name!r}: {what} {y['attrs'].get(k)!r} there, {x['attrs'].get(k)!r} here"
        if x.get("values") != y.get("values"):
            return f"variable {name!r} (without the concat dimension) has other values there"
    return "the variables differ"


def _order(files: list[str], records: list[dict[str, Any]], dim: str) -> tuple[list[int], list[str]]:
    """The files in combined order (by first coordinate value), the coordinate checked; gap notes."""
    if any(r["coord"] is None for r in records):
        return list(range(len(files))), [f"no {dim!r} coordinate: files combined in the order given"]
    for f, r in zip(files, records, strict=True):
        c = r["coord"]
        if c.size and not np.all(np.diff(c) > 0):
            bad = int(np.flatnonzero(np.diff(c) <= 0)[0])
            raise ValueError(f"src: {f}: coordinate {dim!r} is not increasing inside the file "
                             f"({c[bad]!r} then {c[bad + 1]!r} at index {bad + 1})")
    order = sorted((i for i in range(len(files)) if records[i]["n"]), key=lambda i: records[i]["coord"][0])
    steps = [np.diff(records[i]["coord"]) for i in order]
    firsts = np.array([records[i]["coord"][0] for i in order])
    lasts = np.array([records[i]["coord"][-1] for i in order])
    between = firsts[1:] - lasts[:-1]
    for j in np.flatnonzero(between <= 0)[:1]:
        a, b = files[order[j]], files[order[j + 1]]
        raise ValueError(f"src: {b} overlaps {a} along {dim!r}: it starts at {firsts[j + 1]!r}, "
                         f"{a} ends at {lasts[j]!r}")
    inside = np.concatenate(steps) if steps else np.array([])
    typical = np.median(inside) if inside.size else (np.median(between) if between.size else 0)
    notes = []
    gaps = np.flatnonzero(between > 1.5 * typical) if typical else []
    for j in gaps[:_MAX_GAP_NOTES]:
        notes.append(f"gap along {dim!r}: {files[order[j]]} ends at {lasts[j]!r}, {files[order[j + 1]]} starts at "
                     f"{firsts[j + 1]!r} (typical step {typical!r})")
    if len(gaps) > _MAX_GAP_NOTES:
        notes.append(f"… and {len(gaps) - _MAX_GAP_NOTES} more gaps along {dim!r}")
    empty = [i for i in range(len(files)) if not records[i]["n"]]
    return order + empty, notes


def _gcd(values: list[Fraction]) -> Fraction:
    den = math.lcm(*(v.denominator for v in values))
    return Fraction(math.gcd(*(int(v * den) for v in values)), den)


def _repack(name: str, files: list[str], records: list[dict[str, Any]]) -> Repack | None:
    """None if every file packs ``name`` the same way; else the one exact packing; else ValueError.

    Exact in the attributes' decimal values (``_decimal``): with ``1/b`` the greatest common divisor
    of every scale factor and offset difference, file ``i``'s ``p * s_i + o_i`` is
    ``(k_i * p + m_i) / b + O`` for integers ``k_i = s_i * b``, ``m_i = (o_i - O) * b``; stored as
    ``scale_offset(offset=O, scale=b)`` (an integer: exact as a float) + ``cast_value``."""
    packs = [r["packing"].get(name, ("1", "0", "<f4", None, None, None)) for r in records]
    if len({p[:3] for p in packs}) == 1 and len({p[5] for p in packs}) == 1:
        return None
    i0 = next(i for i, p in enumerate(packs) if p[:3] != packs[0][:3] or p[5] != packs[0][5])

    def refuse(why: str) -> ValueError:
        return ValueError(f"src: variable {name!r} is packed differently in {files[0]} (scale_factor={packs[0][0]}, "
                          f"add_offset={packs[0][1]}) and {files[i0]} (scale_factor={packs[i0][0]}, "
                          f"add_offset={packs[i0][1]}), and {why}: repack the files the same way first")

    ftype = np.result_type(*(np.dtype(p[2]) for p in packs))
    origin = Fraction(packs[0][1])
    b = _gcd([Fraction(p[0]) for p in packs] + [abs(Fraction(p[1]) - origin) for p in packs
                                                  if Fraction(p[1]) != origin]).denominator
    per_file, lo, hi = [], 0, 0
    for p in packs:
        k, m = int(Fraction(p[0]) * b), int((Fraction(p[1]) - origin) * b)
        per_file.append((k, m, p[5]))
        if p[3] is not None:
            ends = (k * p[3] + m, k * p[4] + m)
            lo, hi = min(lo, *ends), max(hi, *ends)
    mantissa = 2 ** (np.finfo(ftype).nmant + 1)
    if max(abs(lo), abs(hi), b) >= mantissa:
        raise refuse(f"no single exact packing keeps the values within {ftype}'s {np.finfo(ftype).nmant + 1}-bit "
                     f"mantissa (integers {lo} … {hi} at scale 1/{b})")
    int_dtype = next((t for t in _INTS if np.iinfo(t).min < lo and hi <= np.iinfo(t).max), None)
    if int_dtype is None:
        raise refuse("no 64-bit integer holds the re-expressed values")
    return Repack(ftype.str, np.dtype(int_dtype).name, float(ftype.type(float(origin))), float(b),
                  int(np.iinfo(int_dtype).min), tuple(per_file))
def _raise(exc: Exception) -> Any:
    raise exc
